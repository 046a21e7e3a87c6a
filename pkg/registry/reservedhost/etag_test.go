package reservedhost

import "testing"

func TestIfMatch(t *testing.T) {
	cases := []struct {
		header  string
		match   bool
		invalid bool
	}{
		{`"42"`, true, false},
		{`"41"`, false, false},
		{`*`, true, false},
		{`"1", "42"`, true, false},
		{`W/"42"`, false, false}, // strong comparison: a weak tag never matches
		{`42`, false, true},
		{`"4"2"`, false, true},
		{``, false, true},
	}
	for _, tc := range cases {
		match, err := IfMatch(tc.header, `"42"`)
		if match != tc.match || (err != nil) != tc.invalid {
			t.Errorf("If-Match %q: got %v, %v; want %v, invalid=%v", tc.header, match, err, tc.match, tc.invalid)
		}
	}
}
