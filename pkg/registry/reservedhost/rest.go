package reservedhost

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/sshca"
)

// REST is the ReservedHost main resource; single-object GETs carry an ETag.
type REST struct {
	*base.REST
}

// Get returns the host and sets its ETag on the response.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.REST.Get(ctx, name, options)
	if err == nil {
		exchange.From(ctx).SetResponseHeader("ETag", ETag(obj))
	}
	return obj, err
}

// Storage returns the ReservedHost storages: the resource, its status, and
// the release-capacity, lend and withdraw actions, which update reservations
// as well, and the SSH certificate action.
func Storage(hosts, reservations, nodes, pools, lendings, executions base.Stores, projects auth.ProjectGetter, tokens auth.TokenGetter, ca *sshca.CA) map[string]rest.Storage {
	lend := func(withdraw bool) *LendREST {
		return &LendREST{Withdraw: withdraw, Hosts: hosts.Main, Reservations: reservations.Status,
			Nodes: nodes.Main, Pools: pools.Main, Lendings: lendings.Main, Executions: executions}
	}
	return map[string]rest.Storage{
		"reservedhosts":                  &REST{&base.REST{Store: hosts.Main, Short: []string{"rh", "host", "hosts"}}},
		"reservedhosts/status":           base.NewStatusREST(hosts.Status),
		"reservedhosts/release-capacity": &ReleaseREST{Hosts: hosts.Status, Reservations: reservations.Status},
		"reservedhosts/ssh-certificate":  &SSHCertificateREST{Reservations: reservations.Main, Nodes: nodes.Main, Projects: projects, Tokens: tokens, CA: ca},
		"reservedhosts/lend":             lend(false),
		"reservedhosts/withdraw":         lend(true),
	}
}
