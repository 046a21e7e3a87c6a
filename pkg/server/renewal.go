package server

import (
	"context"
	"strings"
	"time"
)

// credentialCheckInterval is how often a running server looks at its own
// certificates: each is issued anew within its last 30 days, so a daily
// look leaves a month for one that fails.
const credentialCheckInterval = 24 * time.Hour

// renewCredentials issues this replica's certificates anew as they near
// their end, for as long as ctx lasts: the serving certificate (the API
// server reads its files again when they change), the bootstrap
// operator's kubeconfig, and the embedded etcd member's certificates. A
// start does the same; a server that ran past a year without one served
// an expired certificate and could no longer connect to its own etcd.
func (c *Config) renewCredentials(ctx context.Context) {
	ticker := time.NewTicker(credentialCheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		renewed, err := c.renew()
		if len(renewed) > 0 {
			c.out("nodus-server: certificates near their end issued anew: %s", strings.Join(renewed, ", "))
		}
		if err != nil {
			c.out("nodus-server: renewing this replica's certificates failed (the next try is in %s): %v", credentialCheckInterval, err)
		}
	}
}
