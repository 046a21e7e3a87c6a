package ironic

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// maxLimit is the largest page, as Ironic's default [api]max_limit.
const maxLimit = 1000

// page is a list request's paging, sorting and field selection.
type page struct {
	limit   int
	marker  string
	sortKey string
	desc    bool
	fields  []string
}

// parsePage reads limit, marker, sort_key, sort_dir and fields.
func parsePage(q url.Values, sortKeys, fields []string) (page, error) {
	p := page{limit: maxLimit, sortKey: "created_at"}
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(raw, "-") {
			n, err = maxLimit, nil // Ironic's int has no bound: any larger limit is capped
		}
		if err != nil {
			return p, errorf(http.StatusBadRequest, "Invalid limit %q: must be a positive integer", raw)
		}
		if n <= 0 {
			return p, errorf(http.StatusBadRequest, "Limit must be positive")
		}
		p.limit = min(n, maxLimit)
	}
	if p.marker = q.Get("marker"); p.marker != "" && !looksLikeUUID(p.marker) {
		return p, errorf(http.StatusBadRequest, "Invalid marker %q: expected a UUID", p.marker)
	}
	if p.marker != "" {
		p.marker, _ = canonicalUUID(p.marker) // a UUID in capitals is the same one
	}
	if key := q.Get("sort_key"); key != "" {
		if !contains(sortKeys, key) {
			return p, errorf(http.StatusBadRequest, "The sort_key value %q is an invalid field for sorting; use one of %s", key, strings.Join(sortKeys, ", "))
		}
		p.sortKey = key
	}
	switch dir := q.Get("sort_dir"); dir {
	case "", "asc":
	case "desc":
		p.desc = true
	default:
		return p, errorf(http.StatusBadRequest, "Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", dir)
	}
	if raw := q.Get("fields"); raw != "" {
		for _, f := range strings.Split(raw, ",") {
			f = strings.TrimSpace(f) // as Ironic's list parameters
			if !contains(fields, f) {
				return p, errorf(http.StatusBadRequest, "Field(s) %q are not valid", f)
			}
			p.fields = append(p.fields, f)
		}
	}
	return p, nil
}

// order sorts the items of a list by their rows (the fields of their
// views it sorts by, and uuid), starts after the marker and cuts a page.
// It returns the indices in rows of the page's items, and the link to the
// next page, which exists only when the page is full. marker is the row
// of the item p.marker names, whether or not it passes the list's filters
// (it may have changed since the page it ended), nil when there is none.
// The caller builds the views of the page's items alone: a list of 10,000
// nodes in pages of 1,000 built every node's view for each page (session
// 51).
func order[R row](p page, rows []R, marker row, collection, base string, q url.Values) ([]int, string, error) {
	// Each item's sort value and UUID, read once: the sort compares n log n
	// pairs, and read both fields and formatted their values for each
	// (docs/performance.md, session 53).
	sorted := make([]sortKey, len(rows))
	for i, r := range rows {
		sorted[i] = sortKeyOf(r, p.sortKey)
	}
	compare := func(x, y sortKey) int {
		c := strings.Compare(x.value, y.value)
		if c == 0 {
			c = strings.Compare(x.uuid, y.uuid)
		}
		if p.desc {
			return -c
		}
		return c
	}
	items := make([]int, len(rows))
	for i := range items {
		items[i] = i
	}
	// The UUID makes the order total: a stable sort orders no differently.
	slices.SortFunc(items, func(i, j int) int { return compare(sorted[i], sorted[j]) })
	if p.marker != "" {
		if marker == nil {
			// As Ironic, which looks the marker up first: not found.
			kind := "Node"
			if strings.HasPrefix(collection, "allocations") {
				kind = "Allocation"
			}
			return nil, "", errorf(http.StatusNotFound, "%s %s could not be found.", kind, p.marker)
		}
		// The page goes on where the marker sorts, as Ironic's does.
		after := sortKeyOf(marker, p.sortKey)
		items = items[sort.Search(len(items), func(i int) bool { return compare(after, sorted[items[i]]) < 0 }):]
	}
	next := ""
	if len(items) > p.limit {
		items = items[:p.limit]
	}
	if len(items) == p.limit && len(items) > 0 {
		q = cloneQuery(q)
		q.Set("limit", strconv.Itoa(p.limit))
		q.Set("marker", sorted[items[len(items)-1]].uuid)
		next = base + "/v1/" + collection + "?" + q.Encode()
	}
	return items, next, nil
}

// sortKey is what a list sorts an item by: the field it sorts by, and the
// UUID, which makes the order total.
type sortKey struct{ value, uuid string }

// sortKeyOf reads r as R, not as a row: a node's row put in an interface
// would be an allocation per node and page.
func sortKeyOf[R row](r R, field string) sortKey {
	return sortKey{sortable(r.field(field)), sortable(r.field("uuid"))}
}

func sortable(v interface{}) string {
	switch x := v.(type) {
	case *string:
		if x == nil {
			return ""
		}
		return *x
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

func cloneQuery(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func keysOf(view map[string]interface{}) []string {
	out := make([]string, 0, len(view))
	for k := range view {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
