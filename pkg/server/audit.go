package server

import (
	"errors"
	"path/filepath"

	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/nodus-dev/nodus/deploy"
	"github.com/nodus-dev/nodus/pkg/atomicfile"
)

// applyAudit configures the audit log backend with the policy.
func (o *Options) applyAudit(generic *genericapiserver.Config) error {
	audit := genericoptions.NewAuditOptions()
	audit.LogOptions.Path = o.AuditLogPath
	if audit.LogOptions.Path == "" {
		audit.LogOptions.Path = filepath.Join(o.DataDir, "audit.log")
	}
	audit.LogOptions.Format = "json"
	audit.PolicyFile = o.AuditPolicyFile
	if audit.PolicyFile == "" {
		audit.PolicyFile = filepath.Join(o.DataDir, "audit-policy.yaml")
		if err := atomicfile.Write(audit.PolicyFile, deploy.AuditPolicy, 0o644); err != nil {
			return err
		}
	}
	if errs := audit.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	return audit.ApplyTo(generic)
}
