// Package jsonlist encodes JSON lists of stored objects from a cache of each
// item's JSON.
//
// A LIST of 1,000 objects through a JSON client spent most of the server's
// time in encoding/json, encoding objects that had not changed since the
// last LIST (docs/performance.md). An object's JSON is fixed by its UID and
// resourceVersion as long as every read returns the stored object as it is,
// so the server keeps it and writes it again. The library caches an
// object's serialization only for watch events.
package jsonlist

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Cache holds the JSON of stored objects under their UIDs, each checked
// against the resourceVersion, apiVersion and kind it was encoded with.
//
// It keeps two generations: when the current one holds half of its bytes,
// it becomes the previous one and the previous is dropped. An item found in
// the previous generation moves to the current one, so what is listed stays;
// the JSON of an object deleted or changed leaves within two generations.
type Cache struct {
	mu                sync.Mutex
	current, previous map[types.UID]entry
	currentBytes      int
	generationBytes   int
}

type entry struct {
	resourceVersion, apiVersion, kind string
	json                              []byte
}

// NewCache holds at most maxBytes of JSON.
func NewCache(maxBytes int) *Cache {
	return &Cache{current: map[types.UID]entry{}, generationBytes: maxBytes / 2}
}

func (c *Cache) get(uid types.UID, resourceVersion, apiVersion, kind string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.current[uid]
	if !ok {
		if e, ok = c.previous[uid]; ok && e.matches(resourceVersion, apiVersion, kind) {
			delete(c.previous, uid)
			c.addLocked(uid, e)
		}
	}
	if !ok || !e.matches(resourceVersion, apiVersion, kind) {
		return nil, false
	}
	return e.json, true
}

func (c *Cache) put(uid types.UID, e entry) {
	if len(e.json) > c.generationBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A list read at an older revision (a continued page, an exact
	// resourceVersion) does not push out the object's newer JSON, which the
	// next plain LIST asks for.
	for _, generation := range []map[types.UID]entry{c.current, c.previous} {
		if old, ok := generation[uid]; ok && old.supersedes(e) {
			return
		}
	}
	if old, ok := c.current[uid]; ok {
		c.currentBytes -= len(old.json)
	}
	c.addLocked(uid, e)
}

// supersedes says whether e is the same kind's JSON at a later
// resourceVersion than other's: etcd's revisions, in order.
func (e entry) supersedes(other entry) bool {
	if e.apiVersion != other.apiVersion || e.kind != other.kind {
		return false
	}
	mine, err1 := strconv.ParseUint(e.resourceVersion, 10, 64)
	theirs, err2 := strconv.ParseUint(other.resourceVersion, 10, 64)
	return err1 == nil && err2 == nil && mine > theirs
}

func (c *Cache) addLocked(uid types.UID, e entry) {
	if c.currentBytes+len(e.json) > c.generationBytes {
		c.previous, c.current, c.currentBytes = c.current, map[types.UID]entry{}, 0
	}
	c.current[uid] = e
	c.currentBytes += len(e.json)
}

func (e entry) matches(resourceVersion, apiVersion, kind string) bool {
	return e.resourceVersion == resourceVersion && e.apiVersion == apiVersion && e.kind == kind
}
