// Package nvidiagpus reads the NVIDIA driver's own list of the host's GPUs,
// /proc/driver/nvidia/gpus: for each GPU, by PCI bus id, the minor number of
// its /dev/nvidiaN and its UUID. The agent numbers GPUs as NVML and
// nvidia-smi do, in PCI bus order; this list turns such an index into the
// device node a sandbox must be given and the UUID CUDA can be told.
package nvidiagpus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// DriverDir is where the loaded driver lists its GPUs, one directory per
// PCI bus id, each with an "information" file.
const DriverDir = "/proc/driver/nvidia/gpus"

// ErrNoDriver says that the NVIDIA driver is not loaded on this host.
var ErrNoDriver = errors.New("the NVIDIA driver is not loaded (no GPU list)")

// GPU is one GPU as the driver lists it.
type GPU struct {
	// Bus is its PCI bus id, e.g. 0000:1a:00.0.
	Bus string
	// Minor is the minor number of its device node, /dev/nvidia<Minor>.
	// The driver assigns it in the order it probed the GPUs, which need
	// not be the bus order. -1 where its file names none (Err says why).
	Minor int
	// UUID is the GPU's UUID (GPU-…), or "" where the driver shows none
	// or hides it (GPU-????????-…).
	UUID string
	// Err is why its information could not be read: only this GPU is
	// unusable, not the others.
	Err error
}

// uuidPattern is a GPU UUID as CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES take it.
var uuidPattern = regexp.MustCompile(`^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$`)

// List returns the GPUs of dir (DriverDir but in tests) in PCI bus order,
// the order NVML, nvidia-smi and CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID
// number them in. GPUs the driver excluded (NVreg_ExcludedGpus) are left
// out, as NVML and CUDA leave them out. A dir that does not exist is
// ErrNoDriver.
func List(dir string) ([]GPU, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoDriver
	}
	if err != nil {
		return nil, err
	}
	var buses []string
	for _, e := range entries {
		buses = append(buses, e.Name())
	}
	// Bus ids are hexadecimal; drivers have printed them in either case.
	slices.SortFunc(buses, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	gpus := make([]GPU, 0, len(buses))
	for _, bus := range buses {
		data, err := os.ReadFile(filepath.Join(dir, bus, "information"))
		if err != nil {
			gpus = append(gpus, GPU{Bus: bus, Minor: -1, Err: err})
			continue
		}
		gpu, excluded := parseInformation(bus, string(data))
		if !excluded {
			gpus = append(gpus, gpu)
		}
	}
	return gpus, nil
}

// parseInformation reads one GPU's "information" file: "Key: \t value"
// lines. excluded says the driver excluded the GPU.
func parseInformation(bus, info string) (gpu GPU, excluded bool) {
	gpu = GPU{Bus: bus, Minor: -1}
	for _, line := range strings.Split(info, "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "Device Minor":
			minor, err := strconv.Atoi(value)
			if err != nil || minor < 0 {
				gpu.Err = fmt.Errorf("GPU %s: the driver's device minor %q is no number", bus, value)
				continue
			}
			gpu.Minor = minor
		case "GPU UUID":
			if uuidPattern.MatchString(value) {
				gpu.UUID = value
			}
		case "GPU Excluded":
			excluded = strings.EqualFold(value, "yes")
		}
	}
	if gpu.Minor < 0 && gpu.Err == nil {
		gpu.Err = fmt.Errorf("GPU %s: the driver names no device minor", bus)
	}
	return gpu, excluded
}
