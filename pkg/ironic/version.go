// Package ironic serves /v1, OpenStack Ironic's bare-metal API for nodes and
// allocations, as a second view of the same Node and Allocation objects: it
// reads and writes the same stores as the Kubernetes-style API.
package ironic

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// version is an Ironic microversion, 1.minor.
type version struct{ minor int }

var (
	minVersion = version{1}
	// maxVersion is the newest microversion whose node and allocation
	// behaviour this facade implements: allocations (1.52), allocation
	// PATCH (1.57), backfill (1.58) and allocation owner (1.60).
	maxVersion = version{60}

	fieldsSince      = version{8}
	allocationsSince = version{52}
	patchAllocSince  = version{57}
	backfillSince    = version{58}
	ownerSince       = version{60}
)

func (v version) String() string         { return fmt.Sprintf("1.%d", v.minor) }
func (v version) atLeast(o version) bool { return v.minor >= o.minor }

const (
	headerVersion    = "X-OpenStack-Ironic-API-Version"
	headerMinVersion = "X-OpenStack-Ironic-API-Minimum-Version"
	headerMaxVersion = "X-OpenStack-Ironic-API-Maximum-Version"
	headerOpenStack  = "OpenStack-API-Version"
)

// negotiate reads the requested microversion: the Ironic header, or the
// generic OpenStack one ("baremetal 1.52"); "latest" is the maximum; none
// is the minimum.
func negotiate(req *http.Request) (version, error) {
	raw := strings.TrimSpace(req.Header.Get(headerVersion))
	if raw == "" {
		if generic := strings.Fields(req.Header.Get(headerOpenStack)); len(generic) == 2 && strings.EqualFold(generic[0], "baremetal") {
			raw = generic[1]
		}
	}
	if raw == "" {
		return minVersion, nil
	}
	if strings.EqualFold(raw, "latest") {
		return maxVersion, nil
	}
	major, minor, ok := strings.Cut(raw, ".")
	n, err := strconv.Atoi(minor)
	if !ok || major != "1" || err != nil || n < 0 || minor != strconv.Itoa(n) {
		return version{}, fmt.Errorf("Invalid value for %s header: %q. Expected a version like 1.52 or \"latest\"", headerVersion, raw)
	}
	v := version{n}
	if v.minor < minVersion.minor || v.minor > maxVersion.minor {
		return version{}, fmt.Errorf("Version %s was requested but the minor version is not supported by this service. The supported version range is: [%s, %s]", v, minVersion, maxVersion)
	}
	return v, nil
}

// setVersionHeaders announces the supported range and, when known, the version used.
func setVersionHeaders(h http.Header, used *version) {
	h.Set(headerMinVersion, minVersion.String())
	h.Set(headerMaxVersion, maxVersion.String())
	if used != nil {
		h.Set(headerVersion, used.String())
		h.Set(headerOpenStack, "baremetal "+used.String())
		h.Add("Vary", headerVersion)
	}
}
