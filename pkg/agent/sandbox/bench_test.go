package sandbox

import (
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"testing"
)

// BenchmarkStartToExit measures what the sandbox costs an execution: the
// time from start to exit of /bin/true in a runc sandbox, against the same
// command started as a plain process of the same account (the baseline,
// measured in the same run). `go test -bench StartToExit ./pkg/agent/sandbox` as root.
func BenchmarkStartToExit(b *testing.B) {
	if testing.Short() {
		b.Skip("starts real sandboxes")
	}
	b.Run("plain-process", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("runc-sandbox", func(b *testing.B) {
		rt := benchRuntime(b)
		work := b.TempDir()
		for i := 0; i < b.N; i++ {
			sb, err := rt.Start(Spec{ID: fmt.Sprintf("bench-%d", i), Args: []string{"/bin/true"},
				Env: []string{"PATH=/usr/bin:/bin"}, UID: nobody, GID: nobody, HostWorkDir: work, Pids: 64}, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			if err := sb.Wait(); err != nil {
				b.Fatal(err)
			}
			if err := sb.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchRuntime(b *testing.B) *Runtime {
	b.Helper()
	rt, err := Find(b.TempDir())
	if err != nil {
		b.Skip(err.Error())
	}
	rt.CgroupParent = "/nodus-sandbox-bench"
	return rt
}
