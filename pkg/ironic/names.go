package ironic

import "strings"

// maxLogicalName is the longest name Ironic accepts.
const maxLogicalName = 255

// isValidLogicalName is Ironic's is_valid_logical_name (ironic/common/
// utils.py): 1 to 255 of RFC 3986's unreserved characters, A-Z a-z 0-9
// - . _ ~.
func isValidLogicalName(s string) bool {
	if s == "" || len(s) > maxLogicalName {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("-._~", r):
		default:
			return false
		}
	}
	return true
}

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
