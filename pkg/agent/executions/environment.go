package executions

import (
	"errors"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/nvidiagpus"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Environment is what an execution sees: a clean environment with the
// borrower's variables and only its assigned GPUs. HOME is the work
// directory (dir, as the execution sees it): nothing an execution writes
// outlives it.
//
// CUDA is told the GPUs by UUID, from the driver's list (host, in PCI bus
// order): in a sandbox, CUDA and NVML count only the GPUs whose device nodes
// are there, so the host's indices would name other GPUs, or none. Where the
// driver names no UUIDs (no driver loaded), the indices are all there is.
// NODUS_GPU_INDICES are always the host's indices, as the execution's
// status shows them.
func Environment(e *nodusv1.Execution, account, dir string, host []nvidiagpus.GPU) []string {
	indices := make([]string, len(e.Status.GPUIndices))
	uuids := make([]string, 0, len(e.Status.GPUIndices))
	for i, g := range e.Status.GPUIndices {
		indices[i] = strconv.Itoa(int(g))
		if g >= 0 && int(g) < len(host) && host[g].UUID != "" {
			uuids = append(uuids, host[g].UUID)
		}
	}
	visible := strings.Join(indices, ",")
	if len(uuids) == len(indices) {
		visible = strings.Join(uuids, ",")
	}
	nvidia := visible
	if nvidia == "" {
		nvidia = "void" // the NVIDIA container runtime's "no GPU"
	}
	env := []string{"PATH=" + childPath, "HOME=" + dir, "USER=" + account, "LOGNAME=" + account, "TMPDIR=" + dir}
	for _, v := range e.Spec.Env {
		env = append(env, v.Name+"="+v.Value)
	}
	// Last, so that the borrower's env cannot override them. In a sandbox
	// the device cgroup enforces them; these only name the GPUs.
	return append(env, "NODUS_EXECUTION="+e.Name, "NODUS_GPU_INDICES="+strings.Join(indices, ","),
		"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="+visible, "NVIDIA_VISIBLE_DEVICES="+nvidia)
}

// hostGPUs is the driver's list of this host's GPUs, nil where there is
// none: the GPUs are then named by index.
func (r *Runner) hostGPUs() []nvidiagpus.GPU {
	dir := r.opts.GPUDriverDir
	if dir == "" {
		dir = nvidiagpus.DriverDir
	}
	gpus, err := nvidiagpus.List(dir)
	if err != nil && !errors.Is(err, nvidiagpus.ErrNoDriver) {
		klog.ErrorS(err, "reading the NVIDIA driver's GPU list; executions get their GPUs by index")
	}
	return gpus
}
