package cleaning

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rootPaths is a host's account files in a scratch directory: group holds
// /etc/group, sudoers /etc/sudoers, and dropIns the files of /etc/sudoers.d.
func rootPaths(t *testing.T, group, sudoers string, dropIns map[string]string) Paths {
	t.Helper()
	dir := t.TempDir()
	p := Paths{GroupFile: filepath.Join(dir, "group"), Sudoers: filepath.Join(dir, "sudoers"), SudoersDir: filepath.Join(dir, "sudoers.d")}
	if err := os.Mkdir(p.SudoersDir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{p.GroupFile: group, p.Sudoers: sudoers}
	for name, content := range dropIns {
		files[filepath.Join(p.SudoersDir, name)] = content
	}
	if err := os.Mkdir(filepath.Join(dir, "extra"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o440); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// debianGroups and debianSudoers are a stock Debian host's, where the
// tenant (uid and gid 4242) is an ordinary account.
const (
	debianGroups  = "root:x:0:\nadm:x:4:syslog\nsudo:x:27:ubuntu\ndocker:x:999:\ntenant:x:4242:\nvideo:x:44:tenant\n"
	debianSudoers = `Defaults	env_reset
Defaults	secure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# tenant ALL=(ALL) ALL is a comment
root	ALL=(ALL:ALL) ALL
%sudo	ALL=(ALL:ALL) ALL
@includedir /etc/sudoers.d
`
)

func TestRootAccess(t *testing.T) {
	for _, tc := range []struct {
		name    string
		group   string
		sudoers string
		dropIns map[string]string
		want    string // a part of a way found; empty: none
	}{
		{name: "an ordinary account", group: debianGroups, sudoers: debianSudoers,
			dropIns: map[string]string{"README": "# nothing\n", "tenant.dpkg-old": "tenant ALL=(ALL) NOPASSWD:ALL\n", "tenant~": "tenant ALL=(ALL) NOPASSWD:ALL\n"}},
		{name: "group sudo", group: strings.Replace(debianGroups, "sudo:x:27:ubuntu", "sudo:x:27:ubuntu,tenant", 1), sudoers: debianSudoers, want: "member of group sudo"},
		{name: "group docker", group: strings.Replace(debianGroups, "docker:x:999:", "docker:x:999:tenant", 1), sudoers: debianSudoers, want: "member of group docker"},
		{name: "gid 0 under another name", group: debianGroups + "toor:x:0:tenant\n", sudoers: debianSudoers, want: "member of group toor: gid 0"},
		{name: "cloud-init's rule", group: debianGroups, sudoers: debianSudoers,
			dropIns: map[string]string{"90-cloud-init-users": "# Created by cloud-init\ntenant ALL=(ALL) NOPASSWD:ALL\n"}, want: `"tenant ALL=(ALL) NOPASSWD:ALL"`},
		{name: "a rule for one command", group: debianGroups, sudoers: debianSudoers + "tenant ALL = /usr/bin/systemctl restart app # ok?\n", want: `"tenant ALL = /usr/bin/systemctl restart app"`},
		{name: "a rule for its primary group", group: debianGroups, sudoers: debianSudoers + "%tenant ALL=(ALL) ALL\n", want: `"%tenant ALL=(ALL) ALL"`},
		{name: "a rule for a group by gid", group: debianGroups, sudoers: debianSudoers + "%#44 ALL=(ALL) ALL\n", want: `"%#44 ALL=(ALL) ALL"`},
		{name: "a rule by uid", group: debianGroups, sudoers: debianSudoers + "#4242 ALL=(ALL) ALL\n", want: `"#4242 ALL=(ALL) ALL"`},
		{name: "a rule for everyone", group: debianGroups, sudoers: debianSudoers + "ALL ALL=(ALL) NOPASSWD: /usr/bin/less\n", want: "ALL ALL=(ALL)"},
		{name: "a user alias over lines", group: debianGroups, sudoers: debianSudoers + "User_Alias OPS = alice, \\\n  tenant\nOPS ALL=(ALL) ALL\n", want: `"OPS ALL=(ALL) ALL"`},
		{name: "a user list with spaces", group: debianGroups, sudoers: debianSudoers + "alice, tenant ALL = (ALL) ALL\n", want: `"alice, tenant ALL = (ALL) ALL"`},
		{name: "a group list with spaces", group: strings.Replace(debianGroups, "video:x:44:tenant", "gpu:x:44:tenant", 1), sudoers: debianSudoers + "%ops , %gpu ALL=(ALL) ALL\n", want: `"%ops , %gpu ALL=(ALL) ALL"`},
		{name: "an alias defined in the main file, used in a drop-in", group: debianGroups, sudoers: debianSudoers + "User_Alias OPS = tenant\n",
			dropIns: map[string]string{"ops": "OPS ALL=(ALL) ALL\n"}, want: `"OPS ALL=(ALL) ALL"`},
		{name: "an alias of an alias", group: debianGroups, sudoers: debianSudoers + "User_Alias INNER = tenant : OUTER = alice, INNER\nOUTER ALL=(ALL) ALL\n", want: `"OUTER ALL=(ALL) ALL"`},
		{name: "an included file", group: debianGroups, sudoers: debianSudoers + "@include extra/more\n",
			dropIns: map[string]string{"../extra/more": "tenant ALL=(ALL) ALL\n"}, want: `"tenant ALL=(ALL) ALL"`},
		{name: "Red Hat's wheel", group: "root:x:0:\nwheel:x:10:tenant\ntenant:x:4242:\n",
			sudoers: "## Allows people in group wheel to run all commands\n%wheel\tALL=(ALL)\tALL\n#includedir /nonexistent/sudoers.d\n", want: "member of group wheel"},
		{name: "Red Hat's defaults for others", group: "root:x:0:\nwheel:x:10:\ntenant:x:4242:\n",
			sudoers: "## Allow root to run any commands anywhere\nroot\tALL=(ALL) \tALL\n## %sys ALL = NETWORKING\n%wheel\tALL=(ALL)\tALL\n# %wheel ALL=(ALL) NOPASSWD: ALL\n"},
		{name: "rules for others", group: debianGroups, sudoers: debianSudoers + "alice,%adm ALL=(ALL) ALL\nUser_Alias OPS = alice\nOPS ALL=(ALL) ALL\nDefaults:tenant !lecture\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ways, err := rootPaths(t, tc.group, tc.sudoers, tc.dropIns).RootAccess("tenant", 4242, 4242)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(ways) > 0:
				t.Errorf("found %q, want none", ways)
			case tc.want != "" && !slicesContain(ways, tc.want):
				t.Errorf("found %q, want a way with %q", ways, tc.want)
			}
		})
	}
}

// TestALoginUserThatCanBecomeRootIsNotCleanWithoutACommand: resetting the
// account of a tenant that could become root proves nothing about the
// host; without a clean command the cleaning fails (after the reset), and
// with one it says why the command matters.
func TestALoginUserThatCanBecomeRootIsNotCleanWithoutACommand(t *testing.T) {
	s := newScratch(t)
	paths := rootPaths(t, debianGroups, debianSudoers, map[string]string{"90-cloud-init-users": "tenant ALL=(ALL) NOPASSWD:ALL\n"})
	s.cleaner.Paths.GroupFile, s.cleaner.Paths.Sudoers, s.cleaner.Paths.SudoersDir = paths.GroupFile, paths.Sudoers, paths.SudoersDir

	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "login user tenant can become root") || !strings.Contains(r.Err.Error(), "--clean-command") {
		t.Fatalf("cleaning after a tenant with sudo and no clean command: %v", r.Err)
	}
	if s.exists("home/tenant/.ssh/authorized_keys") || s.exists("cron/tenant") {
		t.Error("the account was not reset before the cleaning failed")
	}

	// A tenant with root takes its rights away before it leaves: what the
	// host allowed it when it was granted still counts.
	s.cleaner.Paths.GroupFile, s.cleaner.Paths.Sudoers, s.cleaner.Paths.SudoersDir = rootPaths(t, debianGroups, debianSudoers, nil).GroupFile, "", ""
	r = s.cleaner.Clean(context.Background(), 2, []string{"tenant"}, map[string][]string{"tenant": {"member of group sudo: sudo's default rule for group sudo"}})
	if r.Err == nil || !strings.Contains(r.Err.Error(), "group sudo: sudo's default rule for group sudo (when it was granted)") {
		t.Fatalf("cleaning after a tenant that had sudo when it was granted and gave it up: %v", r.Err)
	}
	if r = s.cleaner.Clean(context.Background(), 3, []string{"tenant"}, nil); r.Err != nil {
		t.Fatalf("cleaning after a tenant that never could become root: %v", r.Err)
	}
	// A tenant with root made its account one the agent does not reset (a
	// uid outside UID_MIN..UID_MAX): what it could do is still on the host.
	r = s.cleaner.Clean(context.Background(), 5, nil, map[string][]string{"tenant": {"member of group sudo"}})
	if r.Err == nil || !strings.Contains(r.Err.Error(), "login user tenant can become root") {
		t.Fatalf("cleaning after a tenant that could become root and whose account is not reset: %v", r.Err)
	}

	s.cleaner.Command = "true"
	r = s.cleaner.Clean(context.Background(), 4, []string{"tenant"}, map[string][]string{"tenant": {"member of group sudo"}})
	if r.Err != nil || !slicesContain(r.Steps, "login user tenant can become root") {
		t.Errorf("with a clean command: %v %q", r.Err, r.Steps)
	}
}

func slicesContain(steps []string, part string) bool {
	for _, s := range steps {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

// TestRootAccessFollowsSymlinkedDropIns: sudo reads a drop-in that is a
// symlink to a file elsewhere, so the look does too.
func TestRootAccessFollowsSymlinkedDropIns(t *testing.T) {
	p := rootPaths(t, debianGroups, debianSudoers, nil)
	target := filepath.Join(filepath.Dir(p.SudoersDir), "extra", "tenant-rule")
	if err := os.WriteFile(target, []byte("tenant ALL=(ALL) NOPASSWD:ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(p.SudoersDir, "50-tenant")); err != nil {
		t.Fatal(err)
	}
	ways, err := p.RootAccess("tenant", 4242, 4242)
	if err != nil || !slicesContain(ways, "50-tenant") {
		t.Errorf("a symlinked drop-in: %q %v", ways, err)
	}
}

// TestGroupsThatCannotBeListedAreNotNone: beside the group file, the
// groups the system's name service knows (LDAP, SSSD) were read for ways
// to root, and a failure to list them (the service down) read as no such
// group: a login user in an LDAP group docker was recorded at its grant as
// one that could not become root, and the cleaning after it, without a
// clean command, passed. It is an error now, which fails the grant and
// the cleaning; the name service's groups are still taken.
func TestGroupsThatCannotBeListedAreNotNone(t *testing.T) {
	tenant := &user.User{Username: "tenant", Uid: "4242", Gid: "4242", HomeDir: "/home/tenant"}
	c := &Cleaner{Paths: rootPaths(t, debianGroups, debianSudoers, nil),
		Lookup: func(string) (*user.User, error) { return tenant, nil }}
	c.Groups = func(*user.User) ([]group, error) { return []group{{name: "tenant", gid: 4242}}, nil }
	if ways, err := c.RootAccess("tenant"); err != nil || len(ways) != 0 {
		t.Fatalf("an ordinary account: %v, %v", ways, err)
	}
	c.Groups = func(*user.User) ([]group, error) { return []group{{name: "docker", gid: 1999}}, nil }
	if ways, err := c.RootAccess("tenant"); err != nil || len(ways) != 1 || !strings.Contains(ways[0], "member of group docker") {
		t.Errorf("a member of the name service's group docker: %v, %v", ways, err)
	}
	c.Groups = func(*user.User) ([]group, error) {
		return nil, errors.New("sss_nss: cannot connect to the SSSD responder")
	}
	if ways, err := c.RootAccess("tenant"); err == nil {
		t.Errorf("groups that cannot be listed: %v and no error", ways)
	}
	// The cleaning after the tenant fails on it without a clean command; a
	// command restores the host whatever the groups are.
	if r := c.Clean(context.Background(), 1, nil, map[string][]string{"tenant": nil}); r.Err == nil {
		t.Errorf("a cleaning without a command, the groups not listed: %+v", r)
	}
	c.Command = "true"
	if r := c.Clean(context.Background(), 2, nil, map[string][]string{"tenant": nil}); r.Err != nil ||
		!slices.ContainsFunc(r.Steps, func(s string) bool {
			return strings.Contains(s, "could not tell whether login user tenant can become root")
		}) {
		t.Errorf("a cleaning with a command, the groups not listed: %v %q", r.Err, r.Steps)
	}
}

// TestSudoersThatCannotBeReadAreNotNone: a sudoers directory or included
// file that could not be read (listed, or looked at) read as holding no
// rule, and a login user's rule in it went unseen. Only one that is not
// there holds none.
func TestSudoersThatCannotBeReadAreNotNone(t *testing.T) {
	p := rootPaths(t, debianGroups, debianSudoers, nil)
	if ways, err := p.RootAccess("tenant", 4242, 4242); err != nil || len(ways) != 0 {
		t.Fatalf("an ordinary account: %v, %v", ways, err)
	}
	loop := filepath.Join(filepath.Dir(p.SudoersDir), "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	for name, paths := range map[string]Paths{
		"a drop-in directory":        {GroupFile: p.GroupFile, Sudoers: p.Sudoers, SudoersDir: loop},
		"an included file":           {GroupFile: p.GroupFile, Sudoers: writeSudoers(t, "@include "+loop+"\n")},
		"an included directory":      {GroupFile: p.GroupFile, Sudoers: writeSudoers(t, "@includedir "+loop+"\n")},
		"a missing one (holds none)": {GroupFile: p.GroupFile, Sudoers: writeSudoers(t, "@includedir "+loop+"-missing\n")},
	} {
		ways, err := paths.RootAccess("tenant", 4242, 4242)
		if missing := strings.Contains(name, "missing"); (err == nil) != missing {
			t.Errorf("%s that cannot be read: %v, %v", name, ways, err)
		}
	}
}

// writeSudoers writes a sudoers file of content and returns its path.
func writeSudoers(t *testing.T, content string) string {
	path := filepath.Join(t.TempDir(), "sudoers")
	if err := os.WriteFile(path, []byte(content), 0o440); err != nil {
		t.Fatal(err)
	}
	return path
}
