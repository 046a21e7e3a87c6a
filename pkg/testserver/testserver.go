// Package testserver starts a real nodus-server in-process, on embedded etcd
// in a temporary directory, for integration tests and benchmarks.
package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/server"
)

const readyTimeout = 2 * time.Minute

// Server is a running nodus-server.
type Server struct {
	DataDir        string
	KubeconfigPath string
	URL            string
	// Config authenticates as the bootstrap operator.
	Config *rest.Config
	// ServerConfig authenticates as the server itself (its loopback), for
	// a controller a test runs as another replica of the server would.
	ServerConfig *rest.Config
	Client       versioned.Interface
	// Stores are the server's registry stores, for tests that read
	// underneath the API.
	Stores *server.Stores

	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// Start runs a server with its data in dataDir until Stop. out receives the
// server's start-up lines (nil discards them); tweaks adjust the options.
// Its log (klog's, the process's) is kept in memory from then on: a test
// shows it when it fails through KeepLogs.
func Start(dataDir string, out io.Writer, tweaks ...func(*server.Options)) (*Server, error) {
	capture()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	opts := server.NewOptions(out)
	opts.DataDir = dataDir
	opts.Listener = listener
	for _, tweak := range tweaks {
		tweak(opts)
	}
	cfg, err := opts.Config()
	if err != nil {
		listener.Close()
		return nil, err
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{DataDir: dataDir, KubeconfigPath: cfg.KubeconfigPath, URL: cfg.URL, Stores: cfg.Stores, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Run(ctx) }()

	if s.Config, err = clientcmd.BuildConfigFromFlags("", cfg.KubeconfigPath); err != nil {
		s.Stop()
		return nil, err
	}
	s.Config.QPS, s.Config.Burst = 1000, 2000
	s.ServerConfig = srv.LoopbackConfig()
	s.ServerConfig.QPS, s.ServerConfig.Burst = 1000, 2000
	if s.Client, err = versioned.NewForConfig(s.Config); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.waitReady(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// StartTestServer starts a server for t and stops it when t ends; should t
// fail, it shows the end of the server's log.
func StartTestServer(t testing.TB) *Server {
	t.Helper()
	KeepLogs(t)
	s, err := Start(t.TempDir(), nil)
	if err != nil {
		t.Fatalf("start nodus-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) waitReady() error {
	rc := s.Client.Discovery().RESTClient()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		body, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = fmt.Errorf("%v: %s", err, body)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("server not ready within %s: %v", readyTimeout, last)
	}
	return nil
}

// Stop stops the server and its embedded etcd and waits for both; again,
// it does nothing.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			fmt.Fprintln(os.Stderr, "testserver: server did not stop within a minute")
		}
	})
}

// EtcdClient connects to the server's embedded etcd, for tests and
// benchmarks that look underneath the API.
func (s *Server) EtcdClient() (*clientv3.Client, error) { return EtcdClientFor(s.DataDir) }

// EtcdClientFor connects to the embedded etcd of a server's data directory.
func EtcdClientFor(dataDir string) (*clientv3.Client, error) {
	cfg, err := embeddedetcd.ClientConfig(filepath.Join(dataDir, "etcd"))
	if err != nil {
		return nil, err
	}
	return clientv3.New(cfg)
}
