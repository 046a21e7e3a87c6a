package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/clusteridentity"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// server is nodus-server running as a child process, so that its CPU time
// is its own and not the load generator's.
type server struct {
	proc   *testfleet.Process
	dir    string
	config *rest.Config
	client versioned.Interface
	etcd   *clientv3.Client
}

// startServer starts nodus-server with its data in dir, on its embedded etcd
// or, when etcdURL is set, on that etcd.
func startServer(binary, dir, etcdURL string) (*server, error) {
	if binary == "" {
		binary = filepath.Join(dir, "nodus-server")
		build := exec.Command("go", "build", "-o", binary, "github.com/nodus-dev/nodus/cmd/nodus-server")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("build nodus-server (or pass -server): %w", err)
		}
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	// The lending scenario keeps more executions than a project may by
	// default.
	flags := []string{"--max-executions-per-project", "100000"}
	if etcdURL != "" {
		// Servers on one external etcd are replicas of one cluster.
		key := filepath.Join(filepath.Dir(dir), "cluster.key")
		if _, err := clusteridentity.EnsureKeyFile(key); err != nil {
			return nil, err
		}
		flags = append(flags, "--etcd-servers", etcdURL, "--cluster-key-file", key)
	}
	proc, err := testfleet.StartServer(binary, filepath.Join(dir, "data"), log, flags...)
	if err != nil {
		return nil, fmt.Errorf("%w (log: %s)", err, log.Name())
	}
	s := &server{proc: proc, dir: proc.DataDir, config: rest.CopyConfig(proc.Config)}
	s.config.QPS, s.config.Burst = 100000, 100000
	if s.client, err = versioned.NewForConfig(s.config); err != nil {
		s.stop()
		return nil, err
	}
	if etcdURL != "" {
		s.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 10 * time.Second})
	} else {
		s.etcd, err = testserver.EtcdClientFor(s.dir)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *server) stop() {
	if s.etcd != nil {
		s.etcd.Close()
	}
	_ = s.proc.Stop(time.Minute)
}

// cpu is the server process's user+system CPU time so far.
func (s *server) cpu() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.proc.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start after ")".
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 || end+2 > len(data) {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", s.proc.Cmd.Process.Pid)
	}
	fields := strings.Fields(string(data[end+2:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", s.proc.Cmd.Process.Pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", s.proc.Cmd.Process.Pid, fields[11], fields[12])
	}
	const ticksPerSecond = 100 // USER_HZ on Linux (sysconf(_SC_CLK_TCK), 100 on every Linux ABI Go supports)
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// etcdCounters are etcd's MVCC revision (one per write transaction) and
// raft index (every proposal, lease grants included).
func (s *server) etcdCounters(ctx context.Context) (revision, raftIndex int64, err error) {
	st, err := s.etcd.Status(ctx, s.etcd.Endpoints()[0])
	if err != nil {
		return 0, 0, err
	}
	return st.Header.Revision, int64(st.RaftIndex), nil
}
