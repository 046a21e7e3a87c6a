// Package revocation ends open watches whose access ended: a watch is
// authorized once, when it starts, and would otherwise stream for as long
// as the client keeps it open. Every open watch is remembered with its
// authorization; when an AccessToken is deleted, a Project's membership
// changes, or a node's agent is enrolled again or deleted, the watches it
// concerns are authorized again and those refused now are cut. A token's
// expiry cuts its watches on time, and so does a client certificate's.
package revocation

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
)

// TokenGetter reads an AccessToken from the cache.
type TokenGetter interface {
	GetAccessToken(ctx context.Context, name string, fresh bool) (*nodusv1.AccessToken, error)
}

// MaxWatchesPerCaller bounds the watches one caller other than an operator
// or an agent keeps open on one server. A watch is a long-running request,
// which no in-flight limit counts, and holds a watcher of the watch cache
// with its buffer: without a bound one tenant's token could open them
// until the server ran out of memory. A person's tools keep tens.
const MaxWatchesPerCaller = 100

// MaxWatchesPerAgent bounds an agent's: it keeps three, but its watch of
// its reservations is how an access's end reaches the host, and on a
// flapping network the server may hold its half-open ones until they time
// out, so its bound is far above what it uses.
const MaxWatchesPerAgent = 1000

// Watches are the open watches of one server.
type Watches struct {
	Authorizer authorizer.Authorizer
	Tokens     TokenGetter

	mu       sync.Mutex
	open     map[*watch]struct{}
	byCaller map[string]int
}

type watch struct {
	ctx   context.Context
	attrs authorizer.Attributes
	token string
	// tokenUID is the UID of the token as authenticated: a token made again
	// under its name is another object.
	tokenUID string
	cancel   context.CancelFunc
	// expiry cuts the watch when its token expires; guarded by Watches.mu.
	expiry *time.Timer
}

// Filter remembers every watch that handler serves, and cuts it when told.
func (w *Watches) Filter(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if !ok || !info.IsResourceRequest || info.Verb != "watch" {
			handler.ServeHTTP(rw, req)
			return
		}
		attrs, err := filters.GetAuthorizerAttributes(req.Context())
		if err != nil {
			handler.ServeHTTP(rw, req)
			return
		}
		caller := attrs.GetUser().GetName()
		if !auth.IsOperator(attrs.GetUser()) {
			most := MaxWatchesPerCaller
			if _, _, agent := auth.NodeOf(attrs.GetUser()); agent {
				most = MaxWatchesPerAgent
			}
			if !w.admit(caller, most) {
				// No Retry-After: waiting does not end a watch, and
				// client-go would wait and ask again ten times, silent.
				apierror.Write(rw, apierror.New(req.Context(), metav1.StatusReasonTooManyRequests,
					schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, "",
					fmt.Sprintf("%s has %d watches open on this server, the most one caller may", caller, most),
					"End one of your open watches first (nodus hosts list -w, kubectl get -w, an informer), then watch again."))
				return
			}
			defer w.release(caller)
		}
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		open := &watch{ctx: ctx, attrs: attrs, cancel: cancel}
		w.add(open)
		defer w.remove(open)
		if token, uid, ok := auth.AccessTokenOf(attrs.GetUser()); ok {
			w.mu.Lock()
			open.token, open.tokenUID = token, uid
			w.mu.Unlock()
			t, err := w.Tokens.GetAccessToken(ctx, open.token, false)
			if apierrors.IsNotFound(err) {
				// The cache may not have a token made a moment ago.
				t, err = w.Tokens.GetAccessToken(ctx, open.token, true)
			}
			switch {
			case err == nil && string(t.UID) != uid:
				// Deleted and made again under its name: another object,
				// perhaps another user's, which keeps no watch of the old one.
				klog.V(2).InfoS("cutting a watch whose access token was made again", "user", attrs.GetUser().GetName(), "token", token)
				open.cancel()
			case err != nil:
				// Deleted as the watch started, whose delete found no watch
				// to cut; or not known now: the client's next watch is
				// authenticated afresh.
				klog.V(2).InfoS("cutting a watch whose access token is not found", "user", attrs.GetUser().GetName(), "err", err)
				open.cancel()
			case t.Spec.ExpiresAt != nil:
				w.expireAt(open, t.Spec.ExpiresAt.Time)
			}
		} else if end, ok := certificateEnd(req, attrs.GetUser()); ok {
			w.expireAt(open, end)
		}
		// A change that ended this access after the request was authorized,
		// and before the watch was registered, found no watch to cut: authorize
		// it once more, now that the next change finds it.
		w.recheck([]*watch{open})
		handler.ServeHTTP(rw, req.WithContext(ctx))
	})
}

// certificateEnd is when the client certificate that authenticated req
// stops being valid. ok is false for a request a bearer token
// authenticated: the server tries a certificate first, so a token's
// request presented none the server took. (The certificates a client sends
// beside its own are its to choose, and need not be its chain: only its
// own end counts. Nodus' CA signs agents' and operators' certificates
// itself.)
func certificateEnd(req *http.Request, u user.Info) (end time.Time, ok bool) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return time.Time{}, false
	}
	if extra := u.GetExtra(); len(extra[auth.ExtraAccessToken]) > 0 || len(extra[auth.ExtraEnrollmentToken]) > 0 {
		return time.Time{}, false
	}
	return req.TLS.PeerCertificates[0].NotAfter, true
}

// expireAt sets when open is cut, replacing an earlier time.
func (w *Watches) expireAt(open *watch, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if open.expiry != nil {
		open.expiry.Stop()
	}
	open.expiry = time.AfterFunc(time.Until(at), open.cancel)
}

// TokenExpires moves the end of an AccessToken's watches to its expiresAt,
// which an operator may set or bring forward while they are open.
func (w *Watches) TokenExpires(name string, at time.Time) {
	for _, open := range w.matching(func(o *watch) bool { return o.token == name }) {
		w.expireAt(open, at)
	}
}

// tokenChanged applies an AccessToken's update to its watches.
func (w *Watches) tokenChanged(before, after *nodusv1.AccessToken) {
	if after.DeletionTimestamp != nil {
		// Deleted, a finalizer holding the object: revoked now.
		w.TokenDeleted(after.Name)
		return
	}
	if before.UID != after.UID {
		// Deleted and made again while the informer was not watching: its
		// relist shows one update, not a delete and a create.
		w.TokenReplaced(after.Name, string(after.UID))
	}
	if after.Spec.ExpiresAt != nil && !after.Spec.ExpiresAt.Equal(before.Spec.ExpiresAt) {
		w.TokenExpires(after.Name, after.Spec.ExpiresAt.Time)
	}
}

// TokenReplaced cuts the watches of an AccessToken's name made with another
// object than the one of UID uid, now stored under it.
func (w *Watches) TokenReplaced(name, uid string) {
	for _, open := range w.matching(func(o *watch) bool { return o.token == name && o.tokenUID != uid }) {
		klog.V(2).InfoS("cutting a watch of an access token made again", "token", name, "user", open.attrs.GetUser().GetName())
		open.cancel()
	}
}

// TokenDeleted cuts the watches of an AccessToken at once.
func (w *Watches) TokenDeleted(name string) {
	for _, open := range w.matching(func(o *watch) bool { return o.token == name }) {
		klog.V(2).InfoS("cutting a watch of a deleted access token", "token", name, "user", open.attrs.GetUser().GetName())
		open.cancel()
	}
}

// ProjectChanged authorizes again the watches in project's namespace.
func (w *Watches) ProjectChanged(project string) {
	w.recheck(w.matching(func(o *watch) bool { return o.attrs.GetNamespace() == project }))
}

// UserChanged authorizes again the watches of one user (a node's agent
// after its node was enrolled again or deleted).
func (w *Watches) UserChanged(name string) {
	w.recheck(w.matching(func(o *watch) bool { return o.attrs.GetUser().GetName() == name }))
}

// Count is the number of open watches, for tests and metrics.
func (w *Watches) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.open)
}

func (w *Watches) recheck(watches []*watch) {
	for _, open := range watches {
		decision, reason, err := w.Authorizer.Authorize(open.ctx, open.attrs)
		if err == nil && decision == authorizer.DecisionAllow {
			continue
		}
		// An error cuts it too: no request starts on one, and a watch left
		// open on it would not be looked at again until the next change.
		// The client's next watch is authorized afresh.
		klog.V(2).InfoS("cutting a watch whose access ended", "user", open.attrs.GetUser().GetName(),
			"namespace", open.attrs.GetNamespace(), "resource", open.attrs.GetResource(), "reason", reason, "err", err)
		open.cancel()
	}
}

func (w *Watches) matching(match func(*watch) bool) []*watch {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*watch
	for open := range w.open {
		if match(open) {
			out = append(out, open)
		}
	}
	return out
}

func (w *Watches) add(open *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open == nil {
		w.open = map[*watch]struct{}{}
	}
	w.open[open] = struct{}{}
}

// admit counts a watch of caller's, unless it has most open.
func (w *Watches) admit(caller string, most int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byCaller == nil {
		w.byCaller = map[string]int{}
	}
	if w.byCaller[caller] >= most {
		return false
	}
	w.byCaller[caller]++
	return true
}

// release counts a watch of caller's ended.
func (w *Watches) release(caller string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byCaller[caller]--; w.byCaller[caller] <= 0 {
		delete(w.byCaller, caller)
	}
}

func (w *Watches) remove(open *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.open, open)
	if open.expiry != nil {
		open.expiry.Stop()
	}
}

// Follow feeds w the changes that end access, from informers of factory,
// until ctx ends.
func (w *Watches) Follow(ctx context.Context, factory externalversions.SharedInformerFactory) error {
	v1 := factory.Nodus().V1()
	if _, err := v1.AccessTokens().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj interface{}) {
			w.tokenChanged(old.(*nodusv1.AccessToken), obj.(*nodusv1.AccessToken))
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := tombstoned(obj).(*nodusv1.AccessToken); ok {
				w.TokenDeleted(t.Name)
			}
		},
	}); err != nil {
		return err
	}
	if _, err := v1.Projects().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj interface{}) { w.ProjectChanged(obj.(*nodusv1.Project).Name) },
		DeleteFunc: func(obj interface{}) {
			if p, ok := tombstoned(obj).(*nodusv1.Project); ok {
				w.ProjectChanged(p.Name)
			}
		},
	}); err != nil {
		return err
	}
	if _, err := v1.Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj interface{}) {
			before, after := old.(*nodusv1.Node), obj.(*nodusv1.Node)
			// A deletion a finalizer holds ends the agent's access as the
			// node's removal does.
			if before.Status.AgentGeneration != after.Status.AgentGeneration || before.UID != after.UID ||
				(before.DeletionTimestamp == nil && after.DeletionTimestamp != nil) {
				w.UserChanged(auth.NodeUserPrefix + after.Name)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if n, ok := tombstoned(obj).(*nodusv1.Node); ok {
				w.UserChanged(auth.NodeUserPrefix + n.Name)
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return nil
}

func tombstoned(obj interface{}) interface{} {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
