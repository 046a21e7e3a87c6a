// Package inventory reads what a host is: CPUs, memory, free disk, OS,
// GPUs and its SSH host key. Each reader is small and tested on recorded
// outputs; the host-specific parts are injected so tests can replace them.
package inventory

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// Collector reads a host's inventory.
type Collector struct {
	// DiskPath is the filesystem whose free space is reported.
	DiskPath string
	// Version is nodusd's release.
	Version string
	// ReadFile and Run reach the host; tests replace them.
	ReadFile func(path string) ([]byte, error)
	Run      func(ctx context.Context, name string, args ...string) (string, error)
	NumCPU   func() int
	FreeGiB  func(path string) (int64, error)
	// NVML reads GPUs through the NVIDIA management library; ErrNoNVML
	// (no library on the host) falls back to nvidia-smi.
	NVML func() ([]nodusv1.NodeGPU, error)
}

// NewCollector reads the real host.
func NewCollector(diskPath, version string) *Collector {
	return &Collector{
		DiskPath: diskPath, Version: version, ReadFile: os.ReadFile, NumCPU: runtime.NumCPU, FreeGiB: freeGiB, NVML: NVMLGPUs,
		Run: func(ctx context.Context, name string, args ...string) (string, error) {
			out, err := exec.CommandContext(ctx, name, args...).Output()
			return string(out), err
		},
	}
}

// Collect reads everything. GPUs come from NVML, or from nvidia-smi where
// NVML is not loadable; a host with neither has no GPUs, which is no error.
func (c *Collector) Collect(ctx context.Context) (nodusv1.NodeInventory, error) {
	inv := nodusv1.NodeInventory{CPU: int32(c.NumCPU()), NodusdVersion: c.Version}
	meminfo, err := c.ReadFile("/proc/meminfo")
	if err != nil {
		return inv, err
	}
	if inv.MemoryMiB, err = ParseMemTotalMiB(string(meminfo)); err != nil {
		return inv, err
	}
	if inv.DiskGiB, err = c.FreeGiB(c.DiskPath); err != nil {
		return inv, fmt.Errorf("free space of %s: %w", c.DiskPath, err)
	}
	if release, err := c.ReadFile("/etc/os-release"); err == nil {
		inv.OS = ParseOSRelease(string(release))
	}
	if c.NVML != nil {
		gpus, err := c.NVML()
		if err == nil {
			inv.GPUs = gpus
			return inv, nil
		}
		if !errors.Is(err, ErrNoNVML) {
			return inv, err
		}
	}
	gpuCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := c.Run(gpuCtx, "nvidia-smi", NvidiaSMIArgs...)
	var notFound *exec.Error
	switch {
	case errors.As(err, &notFound):
		// No NVIDIA driver on this host.
	case err != nil:
		return inv, fmt.Errorf("nvidia-smi: %w", err)
	default:
		if inv.GPUs, err = ParseNvidiaSMI(out); err != nil {
			return inv, err
		}
	}
	return inv, nil
}

// ParseMemTotalMiB reads MemTotal from /proc/meminfo.
func ParseMemTotalMiB(meminfo string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MemTotal %q: %w", fields[1], err)
			}
			return kib / 1024, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal")
}

// ParseOSRelease returns PRETTY_NAME of /etc/os-release, or NAME VERSION_ID.
func ParseOSRelease(release string) string {
	values := map[string]string{}
	for _, line := range strings.Split(release, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok {
			values[k] = strings.Trim(v, `"'`)
		}
	}
	if p := values["PRETTY_NAME"]; p != "" {
		return p
	}
	return strings.TrimSpace(values["NAME"] + " " + values["VERSION_ID"])
}

func freeGiB(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize) / (1 << 30), nil
}

// HostKey reads an sshd host public key (authorized_keys format).
func HostKey(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	// The server accepts the key only in canonical form, without the comment.
	_, canonical, err := sshvalue.ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		return "", fmt.Errorf("%s is not one SSH public key the server accepts: %w", path, err)
	}
	return canonical, nil
}
