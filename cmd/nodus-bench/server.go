package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// server is nodus-server running as a child process, so that its CPU time
// is its own and not the load generator's.
type server struct {
	cmd    *exec.Cmd
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	args := []string{"--data-dir", filepath.Join(dir, "data"), "--secure-port", strconv.Itoa(port)}
	if etcdURL != "" {
		args = append(args, "--etcd-servers", etcdURL)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, dir: filepath.Join(dir, "data")}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(s.dir, "admin.kubeconfig"))
		if err != nil {
			return false, nil
		}
		cfg.QPS, cfg.Burst = 100000, 100000
		client, err := versioned.NewForConfig(cfg)
		if err != nil {
			return false, err
		}
		if _, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			return false, nil
		}
		s.config, s.client = cfg, client
		return true, nil
	})
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("nodus-server did not become ready (log: %s): %w", log.Name(), err)
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
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
	}
}

// cpu is the server process's user+system CPU time so far.
func (s *server) cpu() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start after ")".
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
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
