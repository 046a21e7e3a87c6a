package inventory

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

const meminfo = `MemTotal:       2113486996 kB
MemFree:        2080385024 kB
MemAvailable:   2093467124 kB
`

const osRelease = `PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
`

func fakeHost(smi string, smiErr error) *Collector {
	return &Collector{
		DiskPath: "/var", Version: "0.1.0",
		ReadFile: func(path string) ([]byte, error) {
			switch path {
			case "/proc/meminfo":
				return []byte(meminfo), nil
			case "/etc/os-release":
				return []byte(osRelease), nil
			}
			return nil, os.ErrNotExist
		},
		Run:     func(context.Context, string, ...string) (string, error) { return smi, smiErr },
		NumCPU:  func() int { return 224 },
		FreeGiB: func(string) (int64, error) { return 3500, nil },
		NVML:    func() ([]nodusv1.NodeGPU, error) { return nil, ErrNoNVML },
	}
}

func TestCollect(t *testing.T) {
	smi, _ := os.ReadFile("testdata/nvidia-smi-h100-sxm.csv")
	inv, err := fakeHost(string(smi), nil).Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPU != 224 || inv.MemoryMiB != 2063952 || inv.DiskGiB != 3500 || inv.OS != "Ubuntu 22.04.4 LTS" ||
		inv.NodusdVersion != "0.1.0" || len(inv.GPUs) != 8 || inv.GPUs[7].Type != "h100-sxm-80g" {
		t.Errorf("inventory: %+v", inv)
	}
}

func TestNoNvidiaDriverMeansNoGPUs(t *testing.T) {
	inv, err := fakeHost("", &exec.Error{Name: "nvidia-smi", Err: exec.ErrNotFound}).Collect(context.Background())
	if err != nil || len(inv.GPUs) != 0 {
		t.Errorf("without nvidia-smi: %v %+v", err, inv.GPUs)
	}
	if _, err := fakeHost("", errors.New("exit status 9")).Collect(context.Background()); err == nil {
		t.Error("a failing nvidia-smi must be reported")
	}
}

func TestParsers(t *testing.T) {
	if _, err := ParseMemTotalMiB("MemFree: 1 kB\n"); err == nil {
		t.Error("meminfo without MemTotal parsed")
	}
	if got := ParseOSRelease("NAME=Debian\nVERSION_ID=12\n"); got != "Debian 12" {
		t.Errorf("os-release without PRETTY_NAME: %q", got)
	}
}

func TestNVMLFirst(t *testing.T) {
	host := fakeHost("", errors.New("nvidia-smi must not run when NVML answers"))
	host.NVML = func() ([]nodusv1.NodeGPU, error) {
		return []nodusv1.NodeGPU{{Type: "h200-sxm-141g", MemoryMiB: 143771, Driver: "560.35.03"}}, nil
	}
	inv, err := host.Collect(context.Background())
	if err != nil || len(inv.GPUs) != 1 || inv.GPUs[0].Type != "h200-sxm-141g" {
		t.Errorf("NVML inventory: %v %+v", err, inv.GPUs)
	}
}

// TestNVMLOnThisHost runs the real NVML reader: on a host without the NVIDIA
// driver it must say so (ErrNoNVML), not crash; on a GPU host it lists GPUs.
func TestNVMLOnThisHost(t *testing.T) {
	gpus, err := NVMLGPUs()
	switch {
	case errors.Is(err, ErrNoNVML):
		t.Logf("no NVML here (%v): the agent falls back to nvidia-smi", err)
	case err != nil:
		t.Fatalf("NVML: %v", err)
	default:
		for _, g := range gpus {
			if g.Type == "" || g.MemoryMiB <= 0 {
				t.Errorf("NVML GPU: %+v", g)
			}
		}
		t.Logf("NVML GPUs: %+v", gpus)
	}
}
