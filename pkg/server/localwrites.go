package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	restclient "k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	allocationcontroller "github.com/nodus-dev/nodus/pkg/controller/allocation"
	"github.com/nodus-dev/nodus/pkg/localwrite"
)

// localWriteUserAgent tells the audit log's events of the controllers'
// writes in process from those of their loopback client.
const localWriteUserAgent = "nodus-server (in process)"

// allocationWrites are the allocation controller's claims and status
// writes, in process: the loopback's HTTP and JSON were a fifth to a third
// of an allocation's server CPU.
func (c *completedConfig) allocationWrites(loopback *restclient.Config) (allocationcontroller.Writes, error) {
	u, err := c.loopbackUser(loopback)
	if err != nil {
		return allocationcontroller.Writes{}, err
	}
	opts := localwrite.Options{Scheme: c.Scheme, TypeConverter: c.typeConverter, Admission: c.generic.AdmissionControl,
		AuditBackend: c.generic.AuditBackend, AuditPolicy: c.generic.AuditPolicyRuleEvaluator, Serializer: c.Codecs,
		User: u, UserAgent: localWriteUserAgent}
	nodes, err := localwrite.NewStatus(c.Stores.Nodes.Status, nodusv1.SchemeGroupVersion.WithResource("nodes"),
		nodusv1.SchemeGroupVersion.WithKind("Node"), opts)
	if err != nil {
		return allocationcontroller.Writes{}, err
	}
	allocations, err := localwrite.NewStatus(c.Stores.Allocations.Status, nodusv1.SchemeGroupVersion.WithResource("allocations"),
		nodusv1.SchemeGroupVersion.WithKind("Allocation"), opts)
	if err != nil {
		return allocationcontroller.Writes{}, err
	}
	return allocationcontroller.Writes{
		NodeStatus: func(ctx context.Context, n *nodusv1.Node) (*nodusv1.Node, error) {
			return written[*nodusv1.Node](nodes.Update(ctx, n, allocationcontroller.FieldManager))
		},
		AllocationStatus: func(ctx context.Context, a *nodusv1.Allocation) (*nodusv1.Allocation, error) {
			return written[*nodusv1.Allocation](allocations.Update(ctx, a, allocationcontroller.FieldManager))
		},
	}, nil
}

// written is what a write stored, as its kind.
func written[T runtime.Object](obj runtime.Object, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	out, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("the store wrote a %T, not a %T", obj, zero)
	}
	return out, nil
}

// loopbackUser is the user the loopback client's token authenticates as:
// the writes in process are that client's, audited and admitted as such.
func (c *completedConfig) loopbackUser(loopback *restclient.Config) (user.Info, error) {
	if c.generic.Authentication.Authenticator == nil || loopback.BearerToken == "" {
		return nil, errors.New("the loopback client has no token to authenticate")
	}
	req, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+loopback.BearerToken)
	resp, ok, err := c.generic.Authentication.Authenticator.AuthenticateRequest(req)
	if err != nil || !ok {
		return nil, fmt.Errorf("the loopback client's token does not authenticate: %v", err)
	}
	return resp.User, nil
}
