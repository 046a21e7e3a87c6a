// Package deploy embeds the deployment files nodus-server uses by default.
package deploy

import _ "embed"

// AuditPolicy is the default audit policy (audit-policy.yaml).
//
//go:embed audit-policy.yaml
var AuditPolicy []byte
