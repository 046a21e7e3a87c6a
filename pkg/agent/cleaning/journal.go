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

// toolTimeout bounds a tool the cleaning asks something of (journalctl,
// lastlog), which answers in well under a second on a host that is not
// stuck.
const toolTimeout = 30 * time.Second

// journalDir is a directory journald writes journals to: one machine's
// (and namespace's), or the top level itself (where journald runs with no
// machine ID).
type journalDir struct {
	path      string
	namespace string // "": the default journald's
	// knownNamespace is false for a directory no journald namespace is
	// named after, and a top level that holds no journal: no journald is
	// asked anything for it.
	knownNamespace bool
}

// removeJournals removes, in every directory journald writes to under
// JournalDirs, the journal files of the account's uids (its own and its
// subordinate ones). Each running journald is asked to write out first what
// it holds, and one whose active file was removed to start new files after:
// it holds that file open, and would write the account's next lines (the
// next tenant's) into it. A journald that does not answer is said in the
// steps, not a failed cleaning: the files are removed all the same.
func (c *Cleaner) removeJournals(ctx context.Context, name string, owns sessions.OwnedBy) ([]string, error) {
	dirs, err := journalDirs(c.Paths.JournalDirs)
	if err != nil {
		return nil, err
	}
	removed := 0
	var notes []string
	steps := func() []string {
		return append([]string{fmt.Sprintf("removed %d journal files of %s", removed, name)}, notes...)
	}
	running := map[string]bool{} // by namespace, each looked for once
	for _, d := range dirs {
		if _, looked := running[d.namespace]; !d.knownNamespace || looked {
			continue
		}
		running[d.namespace] = c.journaldListens(d.namespace)
		if running[d.namespace] {
			// From systemd 256 on, also what it has not read yet of the
			// tenant's last lines; before, what it has.
			if err := journalctl(ctx, d.namespace, "--sync"); err != nil {
				notes = append(notes, fmt.Sprintf("%s did not write out its journals: %v", journaldName(d.namespace), err))
			}
		}
	}
	var rotate, notAsked []string
	unknownNoted := false
	for _, d := range dirs {
		n, active, err := removeJournalFiles(d.path, owns, false)
		removed += n
		if err != nil {
			return steps(), err
		}
		switch {
		case !active:
		case !d.knownNamespace:
			if !unknownNoted {
				notes = append(notes, fmt.Sprintf("no journald was asked to start new files in %s (no journald namespace is named so)", d.path))
				unknownNoted = true
			}
		case !running[d.namespace]:
			if !slices.Contains(notAsked, d.namespace) {
				notAsked = append(notAsked, d.namespace)
			}
		case !slices.Contains(rotate, d.namespace):
			rotate = append(rotate, d.namespace)
		}
	}
	for _, ns := range notAsked {
		notes = append(notes, fmt.Sprintf("%s was not asked to start new journal files (no io.systemd.journal socket: it does not run, or is older than systemd 245)",
			journaldName(ns)))
	}
	for _, ns := range rotate {
		if err := journalctl(ctx, ns, "--rotate"); err != nil {
			notes = append(notes, fmt.Sprintf("%s did not start new journal files (%v): the account's next lines go to a removed file until it does",
				journaldName(ns), err))
		} else {
			notes = append(notes, journaldName(ns)+" started new journal files")
		}
	}
	// An archive journald made of an active file after the listing
	// (rotating by size or age), which the removal then missed.
	for _, d := range dirs {
		n, _, err := removeJournalFiles(d.path, owns, true)
		removed += n
		if err != nil {
			return steps(), err
		}
	}
	return steps(), nil
}

// journalDirs lists the directories journald writes to under each of roots.
func journalDirs(roots []string) ([]journalDir, error) {
	var dirs []journalDir
	for _, root := range roots {
		entries, err := os.ReadDir(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		top := journalDir{path: root}
		for _, e := range entries {
			if e.IsDir() { // not a symlink: journald makes directories
				ns, ok := journalNamespace(e.Name())
				dirs = append(dirs, journalDir{path: filepath.Join(root, e.Name()), namespace: ns, knownNamespace: ok})
			} else if strings.HasSuffix(e.Name(), ".journal") {
				top.knownNamespace = true // the default journald's, with no machine ID
			}
		}
		dirs = append(dirs, top)
	}
	return dirs, nil
}

// removeJournalFiles removes the regular files of dir that journald names
// for one of the account's uids (only archived ones, with archivesOnly), and
// reports how many and whether an active one was among them.
func removeJournalFiles(dir string, owns sessions.OwnedBy, archivesOnly bool) (n int, active bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	for _, e := range entries {
		uid, archived, ok := journalUID(e.Name())
		if !ok || !e.Type().IsRegular() || !owns(uid) || (archivesOnly && !archived) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); errors.Is(err, fs.ErrNotExist) {
			continue // archived meanwhile: the second pass takes the archive
		} else if err != nil {
			return n, active, err
		}
		n++
		active = active || !archived
	}
	return n, active, nil
}

// journalUID reads the uid out of the name journald gives a uid's journal
// file, and says whether the file is archived: user-UID.journal while it is
// written, user-UID@ID.journal once archived, user-UID@ID.journal~ when it
// was found unclean.
func journalUID(name string) (uid int, archived, ok bool) {
	rest, ok := strings.CutPrefix(name, "user-")
	if !ok {
		return 0, false, false
	}
	digits, archive, archived := strings.Cut(rest, "@")
	if archived {
		if archive == "" || !(strings.HasSuffix(archive, ".journal") || strings.HasSuffix(archive, ".journal~")) {
			return 0, false, false
		}
	} else if digits, ok = strings.CutSuffix(rest, ".journal"); !ok {
		return 0, false, false
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false, false
	}
	uid, err := strconv.Atoi(digits)
	return uid, archived, err == nil
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

// journaldListens says whether the journald of namespace ns has its
// control socket. journalctl reaches it at /run/systemd/journal[.NS]:
// JournaldRuntime is that /run/systemd on a host, another directory only
// in tests.
func (c *Cleaner) journaldListens(ns string) bool {
	if c.Paths.JournaldRuntime == "" {
		return false
	}
	socket := "journal"
	if ns != "" {
		socket += "." + ns
	}
	_, err := os.Stat(filepath.Join(c.Paths.JournaldRuntime, socket, "io.systemd.journal"))
	return err == nil
}

// journalctl runs journalctl with an action for the journald of namespace ns.
func journalctl(ctx context.Context, ns, action string) error {
	args := []string{action}
	if ns != "" {
		args = append(args, "--namespace="+ns)
	}
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "journalctl", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("journalctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func journaldName(ns string) string {
	if ns == "" {
		return "journald"
	}
	return "journald " + ns
}
