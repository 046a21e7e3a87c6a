package ironic

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// WithDiscovery answers GET / and GET /v1 to anyone, as Ironic does, so
// that Ironic's clients find the API from the service root: / is Ironic's
// root document merged with the Kubernetes path index (both JSON objects,
// each client reads its own keys), /v1 the v1 version document. Both say
// what the server speaks, nothing of what it holds. Every other request
// goes to handler, with its authentication.
func WithDiscovery(handler http.Handler, paths func() []string) http.Handler {
	versions := &Handler{} // the version document needs no store
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			handler.ServeHTTP(w, req)
			return
		}
		switch req.URL.Path {
		case "/":
			serveRoot(w, req, paths())
		case Prefix, Prefix + "/":
			versions.ServeHTTP(w, req)
		default:
			handler.ServeHTTP(w, req)
		}
	})
}

// serveRoot writes the root document.
func serveRoot(w http.ResponseWriter, req *http.Request, paths []string) {
	v1 := v1Version(baseURL(req))
	doc := map[string]interface{}{
		"name":            "OpenStack Ironic API",
		"description":     "Nodus serves OpenStack Ironic's bare-metal API for its nodes and allocations at /v1, beside its Kubernetes-style API (paths).",
		"versions":        []interface{}{v1},
		"default_version": v1,
		"paths":           paths,
	}
	setVersionHeaders(w.Header(), nil)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if req.Method == http.MethodGet {
		_ = json.NewEncoder(w).Encode(doc)
	}
}

// v1Version describes version v1 and its microversions.
func v1Version(base string) map[string]interface{} {
	return map[string]interface{}{
		"id": "v1", "links": []link{{Href: base + "/v1/", Rel: "self"}}, "status": "CURRENT",
		"min_version": minVersion.String(), "version": maxVersion.String(),
	}
}

// ironicResources are /v1's top-level resources, as Ironic names them.
var ironicResources = []string{"nodes", "allocations", "ports", "portgroups", "chassis", "drivers", "conductors",
	"deploy_templates", "volume", "lookup", "heartbeat", "events", "shards", "runbooks"}

// WithDefaultVersion serves Ironic's resources without the version in the
// path as Ironic's root does: /nodes is /v1/nodes. openstacksdk, given the
// service root, sends requests there, and Ironic's bookmark links point
// there.
func WithDefaultVersion(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		first, _, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
		if slices.Contains(ironicResources, first) {
			req = req.Clone(req.Context())
			req.URL.Path = Prefix + req.URL.Path
			if req.URL.RawPath != "" {
				req.URL.RawPath = Prefix + req.URL.RawPath
			}
			req.RequestURI = req.URL.RequestURI()
		}
		handler.ServeHTTP(w, req)
	})
}
