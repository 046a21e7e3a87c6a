package cleaning

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	var ways []string
	for _, g := range groups {
		if why, ok := rootGroups[g.name]; ok || g.gid == 0 {
			if !ok {
				why = "gid 0"
			}
			ways = append(ways, fmt.Sprintf("member of group %s: %s", g.name, why))
		}
	}
	for _, path := range p.sudoersFiles() {
		rule, err := sudoersRuleFor(path, name, uid, groups)
		if err != nil {
			return nil, err
		}
		if rule != "" {
			ways = append(ways, fmt.Sprintf("sudoers rule in %s: %q", path, rule))
		}
	}
	return ways, nil
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

// sudoersFiles are the files sudo reads: the main file and, of the
// drop-in directory, the names without a dot and not ending in ~ (sudo's
// @includedir rule).
func (p Paths) sudoersFiles() []string {
	var files []string
	if p.Sudoers != "" {
		files = append(files, p.Sudoers)
	}
	if p.SudoersDir != "" {
		entries, _ := os.ReadDir(p.SudoersDir)
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.Contains(e.Name(), ".") && !strings.HasSuffix(e.Name(), "~") {
				files = append(files, filepath.Join(p.SudoersDir, e.Name()))
			}
		}
	}
	return files
}

// sudoersRuleFor is the first rule of a sudoers file that applies to user
// name (uid, groups): its user list names the user, its uid, one of its
// groups, ALL, or a User_Alias of one of those. Any rule counts: a rule
// for one command is often a way to a shell. Empty when none does.
func sudoersRuleFor(path, name string, uid int, groups []group) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	matches := func(entry string, aliases map[string]bool) bool {
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
	aliases := map[string]bool{}
	for _, line := range sudoersLines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] == "Defaults" || strings.HasPrefix(fields[0], "Defaults") ||
			fields[0] == "Host_Alias" || fields[0] == "Runas_Alias" || fields[0] == "Cmnd_Alias" || fields[0] == "Cmd_Alias" {
			continue
		}
		if fields[0] == "User_Alias" {
			// User_Alias NAME = a, b : NAME2 = c
			for _, def := range strings.Split(strings.Join(fields[1:], " "), ":") {
				alias, members, ok := strings.Cut(def, "=")
				if !ok {
					continue
				}
				for _, m := range strings.Split(members, ",") {
					if matches(strings.TrimSpace(m), aliases) {
						aliases[strings.TrimSpace(alias)] = true
					}
				}
			}
			continue
		}
		for _, entry := range strings.Split(fields[0], ",") {
			if matches(strings.TrimSpace(entry), aliases) {
				return line, nil
			}
		}
	}
	return "", nil
}

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
		if i := strings.Index(line, "#"); i >= 0 && !strings.HasPrefix(line[i:], "#include") {
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
