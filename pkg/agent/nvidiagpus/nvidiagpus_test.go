package nvidiagpus

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// driverList writes a driver list of GPUs by bus id, each with its information file.
func driverList(t *testing.T, infos map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for bus, info := range infos {
		if err := os.MkdirAll(filepath.Join(dir, bus), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, bus, "information"), []byte(info), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// information is an information file as the driver writes it (see
// testdata for one read off a real GPU).
func information(uuid, minor, bus string) string {
	return "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t " + uuid + "\nVideo BIOS: \t 96.00.99.00.01\n" +
		"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t " + bus +
		"\nDevice Minor: \t " + minor + "\nGPU Firmware: \t 550.54.15\nGPU Excluded:\t No\n"
}

// The list is in bus order, whatever the minors and the case of the bus
// ids; a UUID the driver hides is no UUID.
func TestListIsInBusOrder(t *testing.T) {
	dir := driverList(t, map[string]string{
		"0000:3b:00.0": information("GPU-3b3b3b3b-0000-1111-2222-333333333333", "0", "0000:3b:00.0"),
		"0000:1A:00.0": information("GPU-1a1a1a1a-0000-1111-2222-333333333333", "1", "0000:1A:00.0"),
		"0000:c0:00.0": information("GPU-????????-????-????-????-????????????", "2", "0000:c0:00.0"),
	})
	gpus, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []GPU{
		{Bus: "0000:1A:00.0", Minor: 1, UUID: "GPU-1a1a1a1a-0000-1111-2222-333333333333"},
		{Bus: "0000:3b:00.0", Minor: 0, UUID: "GPU-3b3b3b3b-0000-1111-2222-333333333333"},
		{Bus: "0000:c0:00.0", Minor: 2},
	}
	if !reflect.DeepEqual(gpus, want) {
		t.Errorf("list %+v, want %+v", gpus, want)
	}
}

// The information file of a real H200, as its driver (580.159.04) wrote it, read on a lent machine.
func TestListReadsARealDriversFile(t *testing.T) {
	data, err := os.ReadFile("testdata/h200-information")
	if err != nil {
		t.Fatal(err)
	}
	bus := ""
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Bus Location:"); ok {
			bus = strings.TrimSpace(v)
		}
	}
	gpus, err := List(driverList(t, map[string]string{bus: string(data)}))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || gpus[0].Minor != 0 || !uuidPattern.MatchString(gpus[0].UUID) {
		t.Errorf("the H200's list: %+v", gpus)
	}
}

func TestListRefusesWhatIsNoList(t *testing.T) {
	if _, err := List(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, ErrNoDriver) {
		t.Errorf("no driver: %v", err)
	}
	good := information("GPU-3b3b3b3b-0000-1111-2222-333333333333", "0", "0000:3b:00.0")
	for name, info := range map[string]string{
		"no minor":     "Model: \t NVIDIA H100\nGPU UUID: \t GPU-1a1a1a1a-0000-1111-2222-333333333333\n",
		"a word minor": information("GPU-1a1a1a1a-0000-1111-2222-333333333333", "zero", "0000:1a:00.0"),
		"a minus":      information("GPU-1a1a1a1a-0000-1111-2222-333333333333", "-1", "0000:1a:00.0"),
	} {
		// Only the GPU whose file is broken is unusable.
		gpus, err := List(driverList(t, map[string]string{"0000:1a:00.0": info, "0000:3b:00.0": good}))
		if err != nil || len(gpus) != 2 || gpus[0].Err == nil || gpus[0].Minor != -1 || gpus[1].Err != nil || gpus[1].Minor != 0 {
			t.Errorf("%s: listed %+v, %v", name, gpus, err)
		}
	}
	dir := driverList(t, map[string]string{"0000:3b:00.0": good})
	if err := os.Mkdir(filepath.Join(dir, "0000:1a:00.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if gpus, err := List(dir); err != nil || len(gpus) != 2 || gpus[0].Err == nil || gpus[1].Err != nil {
		t.Errorf("a GPU without its information file: %+v, %v", gpus, err)
	}
}

// A GPU the driver excluded (NVreg_ExcludedGpus) is no GPU to NVML or
// CUDA: counting it would shift every index after it to the next GPU.
func TestListLeavesOutExcludedGPUs(t *testing.T) {
	excluded := strings.Replace(information("GPU-1a1a1a1a-0000-1111-2222-333333333333", "1", "0000:1a:00.0"),
		"GPU Excluded:\t No", "GPU Excluded:\t Yes", 1)
	gpus, err := List(driverList(t, map[string]string{"0000:1a:00.0": excluded,
		"0000:3b:00.0": information("GPU-3b3b3b3b-0000-1111-2222-333333333333", "0", "0000:3b:00.0")}))
	if err != nil || len(gpus) != 1 || gpus[0].Bus != "0000:3b:00.0" {
		t.Errorf("listed %+v, %v", gpus, err)
	}
}
