package ironic

import (
	"encoding/json"
	"net/http"
	"os"
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
