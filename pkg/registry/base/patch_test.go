package base

import "testing"

func TestARefusedPatchRepeatsNoMap(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"unknown patch type: bogus in map: map[$patch:bogus]", "unknown patch type: bogus in map: {…}"},
		{"map: map[env:map[PIN:1234] name:x] does not contain declared merge key: uid", "map: {…} does not contain declared merge key: uid"},
		{"unable to find api field in struct Project for the json field \"bogus\"", "unable to find api field in struct Project for the json field \"bogus\""},
		{"two maps: map[a:1] and map[b:[2 3]]", "two maps: {…} and {…}"},
		{"cut short: map[secret:[1", "cut short: {…}"},
	} {
		if got := withoutMaps(c.in); got != c.want {
			t.Errorf("withoutMaps(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
