package cleaning

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// rootGroups are the groups whose members can become root on a stock
// Debian or Red Hat host: sudo's defaults, and the daemons that run what a
// member asks as root (a container with the host's / mounted, a VM on a
// raw disk) or give raw access to the disks.
var rootGroups = map[string]string{
	"root":        "group root",
	"sudo":        "sudo's default rule for group sudo",
	"admin":       "sudo's default rule for group admin (older Ubuntu)",
	"wheel":       "sudo's default rule for group wheel",
	"docker":      "the Docker daemon runs its containers as root",
	"lxd":         "LXD runs privileged containers for its members",
	"incus-admin": "Incus runs privileged containers for its members",
	"libvirt":     "libvirt runs VMs on any of the host's disks for its members",
	"disk":        "raw access to the disks",
}

// RootAccess lists the ways login user name (primary group gid) can become
// root that nodusd can see: a group in rootGroups, or a sudoers rule that
// names the user, one of its groups, or everyone. It cannot see every way
// (a setuid program, a polkit rule, a capability the operator granted).
func (p Paths) RootAccess(name string, uid, gid int) ([]string, error) {
	groups, err := groupsOf(p.GroupFile, name, gid)
	if err != nil {
		return nil, err
	}
	return p.rootWays(name, uid, groups)
}

func (p Paths) rootWays(name string, uid int, groups []group) ([]string, error) {
	var ways []string
	for _, g := range groups {
		if why, ok := rootGroups[g.name]; ok || g.gid == 0 {
			if !ok {
				why = "gid 0"
			}
			ways = append(ways, fmt.Sprintf("member of group %s: %s", g.name, why))
		}
	}
	rules, err := p.sudoersRulesFor(name, uid, groups)
	return append(ways, rules...), err
}

type group struct {
	name string
	gid  int
}

// groupsOf reads the groups of user name, whose primary group is gid, from
// an /etc/group file. No file: no groups.
func groupsOf(path, name string, gid int) ([]group, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var groups []group
	scan := bufio.NewScanner(f)
	for scan.Scan() {
		fields := strings.Split(scan.Text(), ":")
		if len(fields) != 4 {
			continue
		}
		id, err := strconv.Atoi(fields[2])
		if err != nil {
			continue
		}
		if id == gid || slices.Contains(strings.Split(fields[3], ","), name) {
			groups = append(groups, group{name: fields[0], gid: id})
		}
	}
	return groups, scan.Err()
}

// sudoersFiles are the files sudo reads: the main file, the files and
// directories it includes (@include, @includedir and their #include forms,
// relative to the including file's directory; of a directory, the names
// without a dot and not ending in ~), and the drop-in directory whether
// included or not. One that is not there holds nothing; one that cannot
// be read may hold a rule, and is an error.
func (p Paths) sudoersFiles() ([]string, error) {
	var files []string
	var unreadable error
	fail := func(err error) {
		if !errors.Is(err, fs.ErrNotExist) && unreadable == nil {
			unreadable = err
		}
	}
	seen := map[string]bool{}
	var add func(path string, depth int)
	addDir := func(dir string, depth int) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			fail(err)
		}
		for _, e := range entries {
			if !strings.Contains(e.Name(), ".") && !strings.HasSuffix(e.Name(), "~") {
				add(filepath.Join(dir, e.Name()), depth)
			}
		}
	}
	add = func(path string, depth int) {
		if seen[path] || depth > 8 {
			return
		}
		seen[path] = true
		info, err := os.Stat(path) // sudo follows a symlink
		if err != nil {
			fail(err)
			return
		}
		if !info.Mode().IsRegular() {
			return
		}
		files = append(files, path)
		data, err := os.ReadFile(path)
		if err != nil {
			fail(err)
			return
		}
		for _, line := range strings.Split(string(data), "\n") {
			directive, target, ok := strings.Cut(strings.TrimSpace(line), " ")
			target = strings.TrimSpace(target)
			if !ok || target == "" {
				continue
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(path), target)
			}
			switch directive {
			case "@include", "#include":
				add(target, depth+1)
			case "@includedir", "#includedir":
				addDir(target, depth+1)
			}
		}
	}
	if p.Sudoers != "" {
		add(p.Sudoers, 0)
	}
	if p.SudoersDir != "" {
		addDir(p.SudoersDir, 1)
	}
	return files, unreadable
}

// sudoersRulesFor lists, of each sudoers file, the first rule that applies
// to user name (uid, groups): its user list names the user, its uid, one
// of its groups, ALL, or a User_Alias of those (defined in any file). Any
// rule counts: a rule for one command is often a way to a shell.
func (p Paths) sudoersRulesFor(name string, uid int, groups []group) ([]string, error) {
	files, err := p.sudoersFiles()
	if err != nil {
		return nil, fmt.Errorf("reading the sudoers files: %w", err)
	}
	lines := make(map[string][]string, len(files))
	for _, path := range files {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		lines[path] = sudoersLines(string(data))
	}
	aliases := map[string]bool{}
	matches := func(entry string) bool {
		switch {
		case entry == "ALL", entry == name, entry == "#"+strconv.Itoa(uid), aliases[entry]:
			return true
		case strings.HasPrefix(entry, "%#"):
			for _, g := range groups {
				if entry == "%#"+strconv.Itoa(g.gid) {
					return true
				}
			}
		case strings.HasPrefix(entry, "%"):
			for _, g := range groups {
				if entry == "%"+g.name {
					return true
				}
			}
		}
		return false
	}
	// User_Alias NAME = a, b : NAME2 = c; an alias may name another, in any
	// file: look until no alias is added.
	for changed := true; changed; {
		changed = false
		for _, path := range files {
			for _, line := range lines[path] {
				rest, ok := strings.CutPrefix(line, "User_Alias")
				if !ok {
					continue
				}
				for _, def := range strings.Split(rest, ":") {
					alias, members, ok := strings.Cut(def, "=")
					alias = strings.TrimSpace(alias)
					if !ok || aliases[alias] {
						continue
					}
					for _, m := range strings.Split(members, ",") {
						if matches(strings.TrimSpace(m)) {
							aliases[alias], changed = true, true
							break
						}
					}
				}
			}
		}
	}
	var rules []string
	for _, path := range files {
		for _, line := range lines[path] {
			if userList := sudoersUserList(line); userList != nil && slices.ContainsFunc(userList, matches) {
				rules = append(rules, fmt.Sprintf("sudoers rule in %s: %q", path, line))
				break
			}
		}
	}
	return rules, nil
}

// sudoersUserList is the user list of a rule ("alice, %ops HOST = …"), nil
// for a line that is no rule (Defaults, an alias definition).
func sudoersUserList(line string) []string {
	spec, _, ok := strings.Cut(line, "=")
	if !ok {
		return nil
	}
	fields := strings.Fields(commaSpaces.ReplaceAllString(spec, ","))
	if len(fields) < 2 {
		return nil
	}
	switch first := fields[0]; {
	case strings.HasPrefix(first, "Defaults"), strings.HasSuffix(first, "_Alias"):
		return nil
	}
	var list []string
	for _, entry := range strings.Split(fields[0], ",") {
		if entry != "" {
			list = append(list, entry)
		}
	}
	return list
}

var commaSpaces = regexp.MustCompile(`\s*,\s*`)

// sudoersLines are a sudoers file's lines with comments and include
// directives left out and continued lines joined.
func sudoersLines(text string) []string {
	var lines []string
	var cont strings.Builder
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasSuffix(line, "\\") {
			cont.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		line = cont.String() + line
		cont.Reset()
		if strings.HasPrefix(line, "#include") || strings.HasPrefix(line, "@include") {
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 {
			// "#123" is a uid in a user list; a comment starts a word.
			if i == 0 || line[i-1] == ' ' || line[i-1] == '\t' {
				if i+1 >= len(line) || line[i+1] < '0' || line[i+1] > '9' {
					line = line[:i]
				}
			}
		}
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}
