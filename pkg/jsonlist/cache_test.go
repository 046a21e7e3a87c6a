package jsonlist

import "testing"

// A list read at an older revision (a continued page, an exact
// resourceVersion) must not replace an object's newer JSON: the next plain
// LIST, at the newest revision, would miss it.
func TestAnOlderReadKeepsTheNewerJSON(t *testing.T) {
	c := NewCache(1 << 20)
	c.put("u1", entry{resourceVersion: "6", apiVersion: "nodus.dev/v1", kind: "Node", json: []byte(`{"v":6}`)})
	c.put("u1", entry{resourceVersion: "5", apiVersion: "nodus.dev/v1", kind: "Node", json: []byte(`{"v":5}`)})
	if got, ok := c.get("u1", "6", "nodus.dev/v1", "Node"); !ok || string(got) != `{"v":6}` {
		t.Errorf("the newer JSON after an older read: %s %v", got, ok)
	}
	// Another encoding of the object (its kind set, or not) is its own entry.
	c.put("u1", entry{resourceVersion: "5", apiVersion: "", kind: "", json: []byte(`{"v":5,"typeless":true}`)})
	if got, ok := c.get("u1", "5", "", ""); !ok || string(got) != `{"v":5,"typeless":true}` {
		t.Errorf("another encoding: %s %v", got, ok)
	}
	c.put("u1", entry{resourceVersion: "7", apiVersion: "nodus.dev/v1", kind: "Node", json: []byte(`{"v":7}`)})
	if got, ok := c.get("u1", "7", "nodus.dev/v1", "Node"); !ok || string(got) != `{"v":7}` {
		t.Errorf("a later write's JSON: %s %v", got, ok)
	}
}
