package inventory

import (
	"context"
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nodus-dev/nodus/pkg/agent/nvidiagpus"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// TestTheHostsGPUsAgree runs on a host with NVIDIA GPUs only (none in CI):
// NVML and nvidia-smi report the same GPUs, the server accepts them, and
// NVML's index i is the driver's i-th GPU in bus order — the numbering the
// scheduler assigns, the sandbox's device nodes and CUDA's names all rest on.
func TestTheHostsGPUsAgree(t *testing.T) {
	listed, err := nvidiagpus.List(nvidiagpus.DriverDir)
	if errors.Is(err, nvidiagpus.ErrNoDriver) {
		t.Skip("no NVIDIA driver on this host: a check for hosts with GPUs")
	}
	if err != nil {
		t.Fatal(err)
	}
	viaNVML, err := NVMLGPUs()
	if err != nil {
		t.Fatalf("NVML on a host whose driver lists %d GPUs: %v", len(listed), err)
	}
	smi, err := exec.Command("nvidia-smi", NvidiaSMIArgs...).Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	viaSMI, err := ParseNvidiaSMI(string(smi))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(viaNVML, viaSMI) || len(viaNVML) != len(listed) || len(listed) == 0 {
		t.Fatalf("NVML %+v, nvidia-smi %+v, the driver lists %d", viaNVML, viaSMI, len(listed))
	}
	inv, err := NewCollector("/", "test").Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(inv.GPUs, viaNVML) {
		t.Errorf("the collected inventory %+v, NVML %+v", inv.GPUs, viaNVML)
	}
	for _, e := range validation.ValidateNodeStatus(&nodusv1.Node{Status: nodusv1.NodeStatus{Inventory: inv}}) {
		if strings.HasPrefix(e.Field, "status.inventory") {
			t.Errorf("the server refuses this host's inventory: %v", e)
		}
	}
	t.Logf("GPUs: %+v; driver list: %+v", viaNVML, listed)

	if ret := nvml.Init(); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	defer nvml.Shutdown()
	for i, gpu := range listed {
		device, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("NVML device %d: %s", i, nvml.ErrorString(ret))
		}
		pci, ret := device.GetPciInfo()
		if ret != nvml.SUCCESS {
			t.Fatalf("NVML device %d PCI: %s", i, nvml.ErrorString(ret))
		}
		uuid, _ := device.GetUUID()
		minor, _ := device.GetMinorNumber()
		if bus := busID(pci.BusIdLegacy); !strings.EqualFold(bus, gpu.Bus) || uuid != gpu.UUID || minor != gpu.Minor {
			t.Errorf("NVML device %d is %s %s minor %d; the driver's GPU %d is %+v", i, bus, uuid, minor, i, gpu)
		}
	}
}

// busID is NVML's legacy bus id (domain:bus:device.function, NUL-padded).
func busID(raw [16]int8) string {
	var b strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}
