package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// memory measures the server's resident memory with a fleet of nodes, each
// reserved (one ReservedHost per node), and how long a restart on that data
// takes until /readyz answers.
func memory(c config, binary string) (err error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "nodus-bench")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// The server's log tells why: keep it.
			err = fmt.Errorf("%w (server's log: %s/server.log)", err, dir)
			return
		}
		os.RemoveAll(dir)
	}()
	fmt.Fprintf(os.Stderr, "memory: starting nodus-server in %s\n", dir)
	s, err := startServer(binary, dir, "")
	if err != nil {
		return err
	}
	idle, err := s.residentSet()
	if err != nil {
		s.stop()
		return err
	}
	fmt.Fprintf(os.Stderr, "memory: creating %d reserved nodes\n", c.nodes)
	seeded := time.Now()
	if err := seedFleet(ctx, s, c.nodes, c.concurrency*4, true); err != nil {
		s.stop()
		return err
	}
	if err := waitActive(ctx, s, c.nodes); err != nil {
		s.stop()
		return err
	}
	fmt.Fprintf(os.Stderr, "memory: %d reserved hosts active after %s\n", c.nodes, time.Since(seeded).Round(time.Second))
	// The controllers' work queues drain and the heap settles before the
	// figure is taken.
	time.Sleep(settle)
	loaded, err := s.residentSet()
	if err != nil {
		s.stop()
		return err
	}
	s.stop()

	// The restart reuses the data directory; the etcd client of the first
	// server is gone with it.
	start := time.Now()
	s2, err := startServer(binary, dir, "")
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	ready := time.Since(start)
	defer s2.stop()
	afterRestart, err := s2.residentSet()
	if err != nil {
		return err
	}
	time.Sleep(settle)
	restartSettled, err := s2.residentSet()
	if err != nil {
		return err
	}
	fmt.Printf("memory: %d nodes, each reserved (%d reserved hosts)\n", c.nodes, c.nodes)
	fmt.Printf("  %-32s RSS %4d MB\n", "empty, after start:", idle.rss>>20)
	fmt.Printf("  %-32s RSS %4d MB  (peak %d MB)\n", fmt.Sprintf("loaded, %s after the last host:", settle), loaded.rss>>20, loaded.peak>>20)
	fmt.Printf("  %-32s RSS %4d MB, %s later %d MB  (peak %d MB)\n", "restarted, when ready:", afterRestart.rss>>20, settle, restartSettled.rss>>20, restartSettled.peak>>20)
	fmt.Printf("  %-32s anonymous %d MB, file-backed %d MB (mapped files: etcd's database, the binary)\n", fmt.Sprintf("restarted, %s later, by kind:", settle), restartSettled.anon>>20, restartSettled.file>>20)
	fmt.Printf("  restart → ready %s (start of the process to the first 200 of /readyz, polled every 100 ms)\n\n", ready.Round(time.Millisecond))
	return nil
}

// settle is how long the memory scenario waits before it reads RSS.
const settle = 10 * time.Second

// residentSet is the server's resident memory (VmRSS is RssAnon + RssFile +
// RssShmem).
type residentSet struct{ rss, peak, anon, file int64 }

// residentSet is the server's resident set now and at its peak (VmRSS, VmHWM),
// and how much of it is anonymous memory (the Go heap, stacks, the runtime)
// and how much mapped files, which the kernel can drop and read back.
func (s *server) residentSet() (residentSet, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.proc.Cmd.Process.Pid), "status"))
	if err != nil {
		return residentSet{}, err
	}
	var r residentSet
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			r.rss = kb << 10
		case "VmHWM:":
			r.peak = kb << 10
		case "RssAnon:":
			r.anon = kb << 10
		case "RssFile:":
			r.file = kb << 10
		}
	}
	if r.rss == 0 {
		return residentSet{}, fmt.Errorf("no VmRSS in /proc/%d/status", s.proc.Cmd.Process.Pid)
	}
	return r, nil
}
