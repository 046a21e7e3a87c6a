package ironic

import (
	"strings"

	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// isValidLogicalName is Ironic's is_valid_logical_name, which names of
// nodes and allocations must pass.
func isValidLogicalName(s string) bool { return validation.IsIronicName(s) }

// canonicalUUID returns s as a lower-case 8-4-4-4-12 UUID when it is one
// as oslo's uuidutils.is_uuid_like sees it (any case; hyphens anywhere or
// none; braces; urn:/uuid: prefixes), and false otherwise.
func canonicalUUID(s string) (string, bool) {
	hex := strings.ReplaceAll(strings.ReplaceAll(s, "urn:", ""), "uuid:", "")
	hex = strings.ToLower(strings.ReplaceAll(strings.Trim(hex, "{}"), "-", ""))
	if len(hex) != 32 {
		return "", false
	}
	for _, r := range hex {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return "", false
		}
	}
	return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:], true
}

// isUUIDLike is Ironic's uuidutils.is_uuid_like.
func isUUIDLike(s string) bool { _, ok := canonicalUUID(s); return ok }
