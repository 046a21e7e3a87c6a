package ironic

import (
	"strings"
	"testing"
)

// The expectations are what oslo_utils.uuidutils.is_uuid_like and Ironic's
// is_valid_logical_name answer.
func TestCanonicalUUID(t *testing.T) {
	const want = "8f0e2c1a-1234-4abc-8def-0123456789ab"
	for s, ok := range map[string]bool{
		want:                                     true,
		"{8F0E2C1A-1234-4abc-8def-0123456789ab}": true,
		"urn:uuid:8f0e2c1a12344abc8def0123456789ab": true,
		"8f0e2c1a12344abc8def0123456789ab":          true,
		"8f-0e2c1a12344abc8def0123456789ab":         true,
		"8f0e2c1a-1234-4abc-8def-0123456789ab-":     true,
		"8f0e2c1a-1234-4abc-8def-0123456789a":       false,
		" 8f0e2c1a12344abc8def0123456789ab":         false,
		"8f0e2c1a12344abc8def0123456789_b":          false,
		"8f0e2c1a-1234-4abc-8def-0123456789ag":      false,
		"":                                          false,
	} {
		got, valid := canonicalUUID(s)
		if valid != ok || (ok && got != want) {
			t.Errorf("canonicalUUID(%q) = %q, %v; want valid=%v", s, got, valid, ok)
		}
	}
}

func TestIsValidLogicalName(t *testing.T) {
	for s, ok := range map[string]bool{
		"web-1": true, "Web_Server.1~a": true, "A": true, strings.Repeat("x", 255): true,
		"": false, strings.Repeat("x", 256): false, "a b": false, "a/b": false, "[test]": false, "é": false, "a:b": false,
	} {
		if got := isValidLogicalName(s); got != ok {
			t.Errorf("isValidLogicalName(%q) = %v, want %v", s, got, ok)
		}
	}
}
