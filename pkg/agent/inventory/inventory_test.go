package inventory

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
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
