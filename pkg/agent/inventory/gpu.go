package inventory

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// NvidiaSMIArgs is the query whose CSV output ParseNvidiaSMI reads.
var NvidiaSMIArgs = []string{"--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"}

// ParseNvidiaSMI reads `nvidia-smi --query-gpu=name,memory.total,driver_version
// --format=csv,noheader,nounits`: one GPU a line, memory in MiB.
func ParseNvidiaSMI(out string) ([]nodusv1.NodeGPU, error) {
	var gpus []nodusv1.NodeGPU
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != 3 {
			return nil, fmt.Errorf("nvidia-smi line %d: want name, memory, driver: %q", i+1, line)
		}
		name := strings.TrimSpace(fields[0])
		mem, err := strconv.ParseInt(strings.TrimSpace(fields[1]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi line %d: memory %q: %w", i+1, fields[1], err)
		}
		gpus = append(gpus, nodusv1.NodeGPU{Type: NormalizeGPU(name, mem), MemoryMiB: mem, Driver: strings.TrimSpace(fields[2])})
	}
	return gpus, nil
}

var (
	modelPattern = regexp.MustCompile(`(?i)\b(gh200|gb200|b200|b100|h200|h100|h800|h20|a100|a800|a40|a30|a10g?|l40s?|l4|v100|t4|rtx\s*\d{4}(?:\s*ti)?|rtx\s*a\d{4}|rtx\s*pro\s*\d{4})\b`)
	nonWord      = regexp.MustCompile(`[^a-z0-9]+`)
)

// NormalizeGPU turns a driver's product name into the spec's accelerator type,
// model-formfactor-memory, e.g. "NVIDIA H100 80GB HBM3" → "h100-sxm-80g".
// The memory is rounded to the marketed size.
func NormalizeGPU(name string, memoryMiB int64) string {
	lower := strings.ToLower(name)
	model := modelPattern.FindString(lower)
	if model == "" {
		model = strings.Trim(nonWord.ReplaceAllString(strings.TrimPrefix(lower, "nvidia "), "-"), "-")
	}
	model = strings.Trim(nonWord.ReplaceAllString(model, "-"), "-")
	if len(model) > 48 {
		// The server takes at most 63 characters of type; the suffixes fit in the rest.
		model = strings.TrimRight(model[:48], "-")
	}
	if model == "" {
		model = "gpu"
	}
	parts := []string{model}
	switch {
	case strings.Contains(lower, "pcie"):
		parts = append(parts, "pcie")
	case strings.Contains(lower, "nvl"):
		parts = append(parts, "nvl")
	case strings.Contains(lower, "sxm") || datacenterSXM(model):
		parts = append(parts, "sxm")
	}
	return strings.Join(append(parts, fmt.Sprintf("%dg", marketedGiB(memoryMiB))), "-")
}

// datacenterSXM says whether a model without a form factor in its name is
// an SXM part (the H100/H200/A100 names without "PCIe" are).
func datacenterSXM(model string) bool {
	switch model {
	case "h100", "h200", "h800", "a100", "a800", "b200", "b100", "v100":
		return true
	}
	return false
}

// marketedGiB rounds a GPU's usable memory (MiB) to its marketed size in GB:
// drivers report a little less than the label (81559 MiB for "80GB").
func marketedGiB(memoryMiB int64) int64 {
	gib := float64(memoryMiB) / 1024
	for _, size := range []int64{4, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 120, 128, 141, 144, 180, 192, 288} {
		if gib <= float64(size)*1.02 && gib >= float64(size)*0.90 {
			return size
		}
	}
	return int64(gib + 0.5)
}
