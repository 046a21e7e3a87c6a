package e2e

import "github.com/nodus-dev/nodus/pkg/testfleet"

// syncBuffer collects a process's output while tests read it.
type syncBuffer = testfleet.SyncBuffer
