package node

import (
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/registry/agentview"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Storage is the Node storage and its status subresource; node agents
// list and watch their node as it is now, never from the store's history,
// where it names the tenants before the one on the host (their claims,
// the cleanings asked after them). The agent's credential is its host's,
// which the tenant there, with root, may have copied (docs/security.md).
func Storage(nodes base.Stores) map[string]rest.Storage {
	storage := nodes.Storage("nodes", "no")
	storage["nodes"] = &agentview.Present{REST: storage["nodes"].(*base.REST)}
	return storage
}
