package cleaning

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent/sessions"
)

// rotateTimeout bounds one journald's rotation: it answers once its files
// are new, in well under a second on a host that is not stuck.
const rotateTimeout = 30 * time.Second

// removeJournals removes, in the machine and namespace directories of
// every dir, the journal files of the account's uids (its own and its
// subordinate ones), and asks each running journald that wrote one to start
// new files: it holds the active one open and would write the account's
// next lines (the next tenant's) into the removed file. A journald that
// does not is said in the steps, not a failed cleaning: the tenant's lines
// are gone from every path all the same.
func (c *Cleaner) removeJournals(ctx context.Context, name string, owns sessions.OwnedBy) ([]string, error) {
	removed := 0
	var namespaces []string // of the directories files were removed from
	for _, dir := range c.Paths.JournalDirs {
		machines, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, machine := range machines {
			if !machine.IsDir() { // a symlink too: journald makes directories
				continue
			}
			n, err := removeJournalFiles(filepath.Join(dir, machine.Name()), owns)
			removed += n
			if err != nil {
				return nil, err
			}
			ns, ok := journalNamespace(machine.Name())
			if n > 0 && ok && !slices.Contains(namespaces, ns) {
				namespaces = append(namespaces, ns)
			}
		}
	}
	steps := []string{fmt.Sprintf("removed %d journal files of %s", removed, name)}
	for _, ns := range namespaces {
		steps = append(steps, c.rotateJournal(ctx, ns))
	}
	return steps, nil
}

// removeJournalFiles removes the regular files of dir that journald names
// for one of the account's uids, and reports how many.
func removeJournalFiles(dir string, owns sessions.OwnedBy) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		uid, ok := journalUID(e.Name())
		if !ok || !e.Type().IsRegular() || !owns(uid) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}

// journalUID reads the uid out of the name journald gives a uid's journal
// file: user-UID.journal while it is written, user-UID@ID.journal once
// archived, user-UID@ID.journal~ when it was found unclean.
func journalUID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "user-")
	if !ok {
		return 0, false
	}
	digits, archived, isArchive := strings.Cut(rest, "@")
	if isArchive {
		if archived == "" || !(strings.HasSuffix(archived, ".journal") || strings.HasSuffix(archived, ".journal~")) {
			return 0, false
		}
	} else if digits, ok = strings.CutSuffix(rest, ".journal"); !ok {
		return 0, false
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	uid, err := strconv.Atoi(digits)
	return uid, err == nil
}

// journalNamespace is the journald namespace of a machine directory
// (MACHINE-ID or MACHINE-ID.NAMESPACE); "" is the default one. A name no
// journald namespace has is not one.
func journalNamespace(dir string) (string, bool) {
	_, ns, ok := strings.Cut(dir, ".")
	if !ok {
		return "", true
	}
	if ns == "" || strings.Trim(ns, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
		return "", false
	}
	return ns, true
}

// rotateJournal asks the journald of namespace ns, if one runs, to start
// new files, and says what came of it.
func (c *Cleaner) rotateJournal(ctx context.Context, ns string) string {
	who, args := "journald", []string{"--rotate"}
	runtime := "journal"
	if ns != "" {
		who, args = "journald "+ns, append(args, "--namespace="+ns)
		runtime += "." + ns
	}
	if c.Paths.JournaldRuntime == "" {
		return who + " was not asked to start new journal files (no runtime directory configured)"
	}
	if _, err := os.Stat(filepath.Join(c.Paths.JournaldRuntime, runtime, "io.systemd.journal")); err != nil {
		return who + " does not run: it holds no removed file"
	}
	ctx, cancel := context.WithTimeout(ctx, rotateTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "journalctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s did not start new journal files (journalctl --rotate: %v: %s): the account's next lines go to a removed file until it does",
			who, err, strings.TrimSpace(string(out)))
	}
	return who + " started new journal files"
}
