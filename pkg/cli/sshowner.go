package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
)

// aliasServersFile records, in nodus' ssh directory, which server each
// installed alias is a host of. The alias NAME.PROJECT.nodus names no
// server, and two servers (two providers) may each have a host of that
// project and name: without the record, nodus ssh of the second replaced
// the first's block, pinned key and certificate, and `ssh ALIAS` reached
// the second's host.
const aliasServersFile = "servers.json"

// claimAlias checks that alias may be a host of server in dir: it is
// nobody's yet, or server's, or replace takes it over from another's; else
// the error says how to take it over. Called with nodus' ssh files locked,
// before any of them is written; record, called once the alias's block is
// written, makes it server's.
func claimAlias(dir, alias, server, ref string, replace bool) (record func() error, err error) {
	path := filepath.Join(dir, aliasServersFile)
	servers := map[string]string{}
	switch data, err := os.ReadFile(path); {
	case err == nil:
		if err := json.Unmarshal(data, &servers); err != nil {
			return nil, fmt.Errorf("%s is not what nodus wrote (%v): remove it, and run nodus ssh again for each host you use", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if owner, ok := servers[alias]; ok && owner != server && !replace {
		return nil, usageError(fmt.Errorf("the SSH alias %s is installed for a host of %s, and %s is a host of %s: "+
			"run nodus ssh %s --replace to make %s this one (the other server's host is then no longer reachable by it)",
			alias, owner, ref, server, ref, alias))
	}
	return func() error {
		if servers[alias] == server {
			return nil
		}
		servers[alias] = server
		data, err := json.MarshalIndent(servers, "", "  ")
		if err != nil {
			return err
		}
		return atomicfile.Write(path, append(data, '\n'), 0o600)
	}, nil
}
