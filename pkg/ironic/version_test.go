package ironic

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestNegotiateAsIronic: testdata/microversions.json holds what Ironic
// answers for each set of headers; it was checked against
// microversion_parse (openstack/microversion-parse, with Ironic's
// Version.parse_headers and _check_version around it).
func TestNegotiateAsIronic(t *testing.T) {
	raw, err := os.ReadFile("testdata/microversions.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Headers [][2]string
		Version string // the version used, when accepted
		Status  int    // 406, when refused
		Message string
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		h := http.Header{}
		for _, kv := range c.Headers {
			h.Add(kv[0], kv[1])
		}
		v, err := negotiate(&http.Request{Header: h})
		switch {
		case c.Version != "" && (err != nil || v.String() != c.Version):
			t.Errorf("%q: got %s, %v; want %s", c.Headers, v, err, c.Version)
		case c.Version == "" && (c.Status != http.StatusNotAcceptable || err == nil || err.Error() != c.Message):
			t.Errorf("%q: got %s, %v; want 406 %q", c.Headers, v, err, c.Message)
		}
	}
}

// TestAVersionOfTooManyDigitsIsMalformed: /v1 negotiates before
// authentication, so a minor version of a megabyte of digits must be turned
// away before it is converted (CPython's int() refuses past 4,300 digits).
func TestAVersionOfTooManyDigitsIsMalformed(t *testing.T) {
	for _, c := range []struct {
		minor string
		want  string
	}{
		{strings.Repeat("9", maxIntDigits), "Version 1." + strings.Repeat("9", maxIntDigits) + " was requested but the minor version is not supported"},
		{strings.Repeat("0", maxIntDigits-2) + "52", ""},
		{strings.Repeat("9", maxIntDigits+1), "Invalid value for X-OpenStack-Ironic-API-Version header"},
		{strings.Repeat("9", 1<<20), "Invalid value for X-OpenStack-Ironic-API-Version header"},
	} {
		h := http.Header{}
		h.Set(headerVersion, "1."+c.minor)
		v, err := negotiate(&http.Request{Header: h})
		switch {
		case c.want == "" && (err != nil || v != version{52}):
			t.Errorf("1.<%d digits>: %v, %v; want 1.52", len(c.minor), v, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("1.<%d digits>: %v, %v; want %.80q…", len(c.minor), v, err, c.want)
		}
	}
}
