package inventory

import (
	"os"
	"testing"
)

// The fixtures are nvidia-smi CSV outputs of real models, with the memory
// and driver versions those models report.
func TestParseNvidiaSMI(t *testing.T) {
	cases := map[string]struct {
		count  int
		typ    string
		memory int64
		driver string
	}{
		"nvidia-smi-h100-sxm.csv":      {8, "h100-sxm-80g", 81559, "550.54.15"},
		"nvidia-smi-a100-sxm4.csv":     {2, "a100-sxm-80g", 81920, "535.104.05"},
		"nvidia-smi-h200.csv":          {1, "h200-sxm-141g", 143771, "560.35.03"},
		"nvidia-smi-h100-pcie.csv":     {1, "h100-pcie-80g", 81559, "535.129.03"},
		"nvidia-smi-l40s.csv":          {1, "l40s-48g", 46068, "550.90.07"},
		"nvidia-smi-rtx4090.csv":       {1, "rtx-4090-24g", 24564, "550.120"},
		"nvidia-smi-a100-pcie-40g.csv": {1, "a100-pcie-40g", 40960, "470.57.02"},
	}
	for file, want := range cases {
		data, err := os.ReadFile("testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		gpus, err := ParseNvidiaSMI(string(data))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(gpus) != want.count {
			t.Fatalf("%s: %d GPUs, want %d", file, len(gpus), want.count)
		}
		if g := gpus[0]; g.Type != want.typ || g.MemoryMiB != want.memory || g.Driver != want.driver {
			t.Errorf("%s: %+v, want %s %d %s", file, g, want.typ, want.memory, want.driver)
		}
	}
}

func TestParseNvidiaSMIRejectsGarbage(t *testing.T) {
	for _, out := range []string{"NVIDIA H100, lots, 550", "just one field"} {
		if _, err := ParseNvidiaSMI(out); err == nil {
			t.Errorf("%q parsed", out)
		}
	}
	if gpus, err := ParseNvidiaSMI("\n"); err != nil || len(gpus) != 0 {
		t.Errorf("empty output: %v %v", gpus, err)
	}
}
