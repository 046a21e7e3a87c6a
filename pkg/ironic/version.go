// Package ironic serves /v1, OpenStack Ironic's bare-metal API for nodes and
// allocations, as a second view of the same Node and Allocation objects: it
// reads and writes the same stores as the Kubernetes-style API.
package ironic

import (
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"unicode"
)

// version is an Ironic microversion, 1.minor.
type version struct{ minor int }

var (
	minVersion = version{1}
	// maxVersion is the newest microversion whose node and allocation
	// behaviour this facade implements: allocations (1.52), allocation
	// PATCH (1.57), backfill (1.58) and allocation owner (1.60).
	maxVersion = version{60}

	nodeNamesSince   = version{5}
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

// negotiate reads the requested microversion as Ironic does, with
// microversion_parse.get_version(headers, 'baremetal',
// legacy_headers=[X-OpenStack-Ironic-API-Version]) and
// parse_version_string: the generic header wins over Ironic's own; none
// is the minimum, "latest" (any case) the maximum. Every failure is a 406,
// with Ironic's messages: Ironic answers no version problem with a 400.
func negotiate(req *http.Request) (version, error) {
	raw := requestedVersion(req.Header)
	if raw == "" {
		raw = minVersion.String()
	}
	if strings.ToLower(raw) == "latest" {
		raw = maxVersion.String()
	}
	// parse_version_string: int() of each side of the first dot.
	majorRaw, minorRaw, ok := strings.Cut(raw, ".")
	major, okMajor := pythonInt(majorRaw)
	minor, okMinor := pythonInt(minorRaw)
	if !ok || !okMajor || !okMinor {
		return version{}, fmt.Errorf("Invalid value for %s header", headerVersion)
	}
	asked := major.String() + "." + minor.String()
	if !major.IsInt64() || major.Int64() != 1 {
		return version{}, fmt.Errorf("Mutually exclusive versions requested. Version %s requested but not supported by this service. The supported version range is: [%s, %s].", asked, minVersion, maxVersion)
	}
	if !minor.IsInt64() || minor.Int64() < int64(minVersion.minor) || minor.Int64() > int64(maxVersion.minor) {
		return version{}, fmt.Errorf("Version %s was requested but the minor version is not supported by this service. The supported version range is: [%s, %s].", asked, minVersion, maxVersion)
	}
	return version{int(minor.Int64())}, nil
}

// requestedVersion is microversion_parse.get_version for the baremetal
// service: in OpenStack-API-Version ("compute 2.1, baremetal 1.52"), the
// last entry for baremetal, the service named in any case; failing that,
// the last comma-separated value of X-OpenStack-Ironic-API-Version. A
// header sent more than once counts as its values joined by commas, as the
// WSGI server folds them. "" when neither names a version.
func requestedVersion(h http.Header) string {
	if values := h.Values(headerOpenStack); len(values) > 0 {
		entries := strings.Split(strings.Join(values, ","), ",")
		for i := len(entries) - 1; i >= 0; i-- {
			entry := strings.TrimSpace(entries[i])
			cut := strings.IndexFunc(entry, unicode.IsSpace)
			if cut < 0 {
				continue // "baremetal" alone names no version
			}
			if strings.ToLower(entry[:cut]) == "baremetal" {
				return strings.TrimSpace(entry[cut:])
			}
		}
	}
	if values := h.Values(headerVersion); len(values) > 0 {
		entries := strings.Split(strings.Join(values, ","), ",")
		return strings.TrimSpace(entries[len(entries)-1])
	}
	return ""
}

// maxIntDigits is CPython's limit on the digits int() converts (3.11 on,
// sys.get_int_max_str_digits): past it int() raises ValueError, which
// Ironic answers as a malformed version. It also bounds the work of a
// header any caller may send: /v1 is negotiated before authentication, and
// decimal parsing takes time in the square of the digits.
const maxIntDigits = 4300

// pythonInt parses s as Python's int(s) does for the ASCII digits:
// surrounding whitespace, one sign, leading zeros and single underscores
// between digits are allowed ("1.052" is 1.52 in Ironic), and up to
// maxIntDigits digits (a huge minor is out of range, not malformed).
func pythonInt(s string) (*big.Int, bool) {
	s = strings.TrimSpace(s)
	negative := strings.HasPrefix(s, "-")
	if negative || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return nil, false
	}
	digits := strings.ReplaceAll(s, "_", "")
	if len(digits) > maxIntDigits {
		return nil, false
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return nil, false
		}
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if ok && negative {
		n.Neg(n)
	}
	return n, ok
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
