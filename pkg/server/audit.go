package server

import (
	"errors"
	"path/filepath"

	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/nodus-dev/nodus/deploy"
	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/auditlimit"
)

// writtenPolicyHeader heads the built-in policy where the server writes it.
const writtenPolicyHeader = "# Written by nodus-server at each start: an edit here is lost. To change the\n" +
	"# policy, copy this file elsewhere, edit the copy and pass --audit-policy-file.\n"

// applyAudit configures the audit log backend with the policy.
func (o *Options) applyAudit(generic *genericapiserver.Config) error {
	audit := genericoptions.NewAuditOptions()
	audit.LogOptions.Path = o.AuditLogPath
	if audit.LogOptions.Path == "" {
		audit.LogOptions.Path = filepath.Join(o.DataDir, "audit.log")
	}
	audit.LogOptions.Format = "json"
	audit.LogOptions.MaxSize, audit.LogOptions.MaxBackups, audit.LogOptions.MaxAge = o.AuditLogMaxSize, o.AuditLogMaxBackups, o.AuditLogMaxAge
	audit.WebhookOptions.ConfigFile = o.AuditWebhookConfigFile
	audit.PolicyFile = o.AuditPolicyFile
	if audit.PolicyFile == "" {
		// Written at each start: an edit of this copy would be lost
		// unannounced, so the copy says so.
		audit.PolicyFile = filepath.Join(o.DataDir, "audit-policy.yaml")
		if err := atomicfile.Write(audit.PolicyFile, append([]byte(writtenPolicyHeader), deploy.AuditPolicy...), 0o644); err != nil {
			return err
		}
	}
	if errs := audit.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := audit.ApplyTo(generic); err != nil {
		return err
	}
	if generic.AuditBackend != nil {
		// Before the handler chain is built on it: anyone who reaches the
		// port can send requests the policy records.
		generic.AuditBackend = auditlimit.New(generic.AuditBackend)
	}
	return nil
}
