package executions

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent/nvidiagpus"
	"github.com/nodus-dev/nodus/pkg/agent/sandbox"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// cudaProbe asks the CUDA driver (libcuda, its path the first argument)
// which GPUs it sees: "cuInit N" when it sees none, else "count N" and a
// "device I BUS UUID" line each, the UUID as 32 hex digits.
const cudaProbe = `
import ctypes, sys
cuda = ctypes.CDLL(sys.argv[1])
r = cuda.cuInit(0)
if r != 0:
    print("cuInit", r); sys.exit(0)
n = ctypes.c_int()
cuda.cuDeviceGetCount(ctypes.byref(n))
print("count", n.value)
for i in range(n.value):
    d = ctypes.c_int(); cuda.cuDeviceGet(ctypes.byref(d), i)
    u = (ctypes.c_ubyte * 16)(); cuda.cuDeviceGetUuid(u, d)
    b = ctypes.create_string_buffer(32); cuda.cuDeviceGetPCIBusId(b, 32, d)
    print("device", i, b.value.decode(), bytes(u).hex())
`

// libcuda is the CUDA driver library of this host, "" where there is none.
func libcuda() string {
	out, _ := exec.Command("ldconfig", "-p").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "libcuda.so.1 ") && strings.Contains(line, "x86-64") {
			if _, path, ok := strings.Cut(line, "=> "); ok {
				return strings.TrimSpace(path)
			}
		}
	}
	for _, path := range []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib64/libcuda.so.1"} {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	return ""
}

// TestAnExecutionsCUDASeesItsGPUsOnly runs on a host with NVIDIA GPUs, runc
// and root only (none in CI): an execution's CUDA, and nvidia-smi, see the
// GPUs it was given, named as Environment names them, and nothing without.
// In the sandbox they count only the GPUs whose nodes are there.
func TestAnExecutionsCUDASeesItsGPUsOnly(t *testing.T) {
	listed, err := nvidiagpus.List(nvidiagpus.DriverDir)
	switch {
	case errors.Is(err, nvidiagpus.ErrNoDriver):
		t.Skip("no NVIDIA driver on this host: a check for hosts with GPUs")
	case err != nil:
		t.Fatal(err)
	case len(listed) == 0:
		t.Skip("the NVIDIA driver lists no GPU on this host")
	case os.Geteuid() != 0:
		t.Skip("runc sandboxes need root")
	}
	rt, err := sandbox.Find(t.TempDir())
	if err != nil {
		t.Skip(err.Error())
	}
	rt.CgroupParent = "/nodus-executions-gpu-test"
	lib, python := libcuda(), "/usr/bin/python3"
	if _, err := os.Stat(python); lib == "" || err != nil {
		t.Skipf("the CUDA probe needs libcuda (%q) and %s", lib, python)
	}
	// nvidia-smi is checked where it runs in an execution's clean
	// environment on the host itself.
	smi, _ := exec.LookPath("nvidia-smi")
	if smi != "" {
		check := exec.Command(smi, "-L")
		check.Env = []string{"PATH=" + childPath}
		if out, err := check.CombinedOutput(); err != nil {
			t.Logf("nvidia-smi fails in a clean environment on this host, not checked: %v %s", err, out)
			smi = ""
		}
	}
	const nobody = 65534
	given := int32(len(listed) - 1) // the last: on a host of several, not CUDA's 0 on the host
	for _, c := range []struct {
		name string
		gpus []int32
	}{{"one GPU", []int32{given}}, {"no GPU", nil}} {
		e := &nodusv1.Execution{}
		e.Name, e.Status.GPUIndices = "gpu-probe", c.gpus
		work := filepath.Join(t.TempDir(), "work")
		if err := os.Mkdir(work, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(work, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(work); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			_ = os.Chmod(d, 0o711)
		}
		// CUDA as the execution is told, then as if it were told nothing:
		// the sandbox, not the variable, decides what there is.
		probe := fmt.Sprintf("%s -c '%s' %s 2>&1", python, cudaProbe, lib)
		script := fmt.Sprintf("echo '== named'; %s; echo '== unnamed'; env -u CUDA_VISIBLE_DEVICES %s; echo '== smi'", probe, probe)
		if smi != "" {
			script += fmt.Sprintf("; %s --query-gpu=uuid --format=csv,noheader 2>&1", smi)
		}
		var out bytes.Buffer
		box, err := rt.Start(sandbox.Spec{ID: fmt.Sprintf("gpu%d", time.Now().UnixNano()), Args: []string{"/bin/sh", "-c", script},
			Env: Environment(e, "nobody", sandbox.WorkDir, listed), UID: nobody, GID: nobody, HostWorkDir: work, GPUs: c.gpus}, &out)
		if err != nil {
			t.Fatal(err)
		}
		_ = box.Wait()
		_ = box.Close()
		t.Logf("%s:\n%s", c.name, out.String())
		sections := map[string]string{}
		for _, part := range strings.Split(out.String(), "== ")[1:] {
			name, body, _ := strings.Cut(part, "\n")
			sections[name] = body
		}
		var want []string
		for _, g := range c.gpus {
			want = append(want, strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(listed[g].UUID, "GPU-"), "-", "")))
		}
		for _, told := range []string{"named", "unnamed"} {
			if saw := cudaSaw(sections[told]); !slices.Equal(saw, want) {
				t.Errorf("%s, CUDA %s: saw %v, want %v:\n%s", c.name, told, saw, want, sections[told])
			}
		}
		var wantSMI []string
		for _, g := range c.gpus {
			wantSMI = append(wantSMI, listed[g].UUID)
		}
		if saw := strings.Fields(sections["smi"]); smi != "" && c.gpus != nil && !slices.Equal(saw, wantSMI) {
			t.Errorf("%s: nvidia-smi listed %v, want %v", c.name, saw, wantSMI)
		}
		if smi != "" && c.gpus == nil && strings.Contains(sections["smi"], "GPU-") {
			t.Errorf("%s: nvidia-smi listed\n%s", c.name, sections["smi"])
		}
	}
}

// cudaSaw reads cudaProbe's output: the UUIDs of the devices CUDA saw,
// nil for none (cuInit's CUDA_ERROR_NO_DEVICE, 100); anything else is the
// probe's own failure, reported as what it printed.
func cudaSaw(out string) []string {
	var uuids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "device":
			uuids = append(uuids, f[3])
		case len(f) == 2 && (f[0] == "count" || line == "cuInit 100"):
		default:
			return []string{"unexpected: " + line}
		}
	}
	return uuids
}
