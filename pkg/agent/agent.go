package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/cleaning"
	"github.com/nodus-dev/nodus/pkg/agent/executions"
	"github.com/nodus-dev/nodus/pkg/agent/inventory"
	"github.com/nodus-dev/nodus/pkg/agent/sandbox"
	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	"github.com/nodus-dev/nodus/pkg/agent/state"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/outcome"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// Options configure `nodusd run`.
type Options struct {
	StateDir string
	// Servers, when set, are the nodus-server replicas to use instead of
	// those given at enrollment.
	Servers []string
	// SSHHostKey is the sshd host public key reported for connect.hostKey.
	SSHHostKey string
	// SSHAddress is host:port of the host's sshd, reported to the server.
	SSHAddress string
	// DiskPath is the filesystem whose free space is reported.
	DiskPath string
	Version  string
	// Grace is how long retired sessions get between SIGTERM and SIGKILL.
	Grace time.Duration
	// InventoryEvery is how often the inventory is read again.
	InventoryEvery time.Duration
	// Socket serves the principals for sshd's AuthorizedPrincipalsCommand;
	// default STATE-DIR/agent.sock.
	Socket string
	// SSHDCAFile, when set, receives the server's SSH user CA key for
	// sshd's TrustedUserCAKeys.
	SSHDCAFile string
	// SSHDDropIn, when set, receives the sshd configuration that makes sshd
	// trust SSHDCAFile and ask this nodusd for principals.
	SSHDDropIn string
	// BorrowerUser is the unprivileged account borrowers' executions run as.
	BorrowerUser string
	// BorrowerSlots, when above zero, runs every execution as an account of
	// its own, BorrowerUser-0 … BorrowerUser-(N-1): executions cannot see or
	// signal each other, and whatever one leaves behind is ended with it.
	BorrowerSlots int
	// Sandbox is how executions are isolated: SandboxRunc (the default) or
	// SandboxNone (no isolation, development only).
	Sandbox string
	// ImagesDir holds the OCI images executions may name; default DefaultImagesDir.
	ImagesDir string
	// ExecutionsDir holds the executions' work directories; default
	// DefaultExecutionsDir. nodusd makes it root's, 0700 (0711 without a
	// sandbox, for the borrower account to reach its own directory); it is
	// not inside the private state directory.
	ExecutionsDir string
	// CleanCommand, when set, is the operator's own handover step (wipe
	// scratch disks, reset GPUs, re-image), run by /bin/sh -c after the
	// login accounts are reset; it must exit 0 for the node to be handed on.
	CleanCommand string
	// CleanTimeout bounds CleanCommand; default 30 minutes.
	CleanTimeout time.Duration
	// LoginGroup is the group the drop-in makes certificate-only; default
	// DefaultLoginGroup.
	LoginGroup string
	// CleaningPaths are where accounts leave things; default cleaning.DefaultPaths.
	CleaningPaths *cleaning.Paths
}

// Agent is a running nodusd.
type Agent struct {
	opts      Options
	id        identity
	client    versioned.Interface
	cred      *credential
	store     *state.Store
	inventory *inventory.Collector
	procs     sessions.Procs
	runner    *executions.Runner
	lent      func() bool
	// agreement is the owner's lending agreement while the host is lent,
	// its missing caps filled from hostInventory.
	agreement func() *nodusv1.ReservationLending
	// hostInventory is the host as this agent last read it: its own
	// figures, not the server's copy of them.
	hostInventory atomic.Pointer[nodusv1.NodeInventory]
	cleaning      *cleaning.Cleaner
	// reservations is the informer's store of this node's reservations.
	reservations cache.Store
	// ownNode is this agent's Node as its informer shows it now (nil once
	// deleted), the one read at the start until the informer has synced;
	// set before anything runs that reads it.
	ownNode   func() *nodusv1.Node
	cleanings chan *nodusv1.NodeCleaning

	mu       sync.Mutex
	interval time.Duration
	beatNow  chan struct{}
	// beats is the heartbeat stream, used by the heartbeats goroutine only.
	beats beatStream
	// evidence is the latest cleaning done, reported until the node shows it.
	evidence *nodusv1.CleaningEvidence
	// ending holds the login users whose processes a beat is ending.
	ending map[string]bool
	// unrecorded are the reservations whose newest access state the state
	// database did not take (a full or failing disk): none of their
	// principals is served until it does, and recordAgain writes it again.
	unrecorded map[string]bool
	// refused are the reservations whose newest access names a login user
	// nodusd never grants (root, a system or a borrower account): the
	// access it changed is not served either.
	refused map[string]bool
	// refusals say, by reservation, which epoch's access the agent does
	// not grant and why: its heartbeats report them, so that the tenant
	// is shown why it cannot log in (not only in this host's log).
	refusals map[string]refusal
	// termEnded are the reservations whose term ended by this host's
	// clock while the server still showed them active (watchTerms).
	termEnded map[string]bool
	// rootWarned are the login users recordRootAccess warned of (under applying).
	rootWarned map[string]bool
	// applying makes one apply or retire at a time: the informer's and
	// recordAgain's.
	applying sync.Mutex
}

// New loads the agent's credential and state.
func New(opts Options) (*Agent, error) {
	cfg, id, cred, err := clientConfig(opts.StateDir, opts.Servers)
	if err != nil {
		return nil, err
	}
	client, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	store, err := state.Open(filepath.Join(opts.StateDir, fileState))
	if err != nil {
		return nil, err
	}
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Second
	}
	if opts.InventoryEvery == 0 {
		opts.InventoryEvery = 5 * time.Minute
	}
	if opts.DiskPath == "" {
		opts.DiskPath = "/"
	}
	if opts.SSHAddress == "" {
		// Not refused: an operator may enroll and clean a machine first.
		klog.InfoS("WARNING: no --ssh-address (sshAddress in the configuration file): tenants of this host get no SSH certificate (SSHAddressUnknown) until nodusd reports where its sshd is reached")
	}
	if opts.Socket == "" {
		opts.Socket = filepath.Join(opts.StateDir, "agent.sock")
	}
	if opts.BorrowerUser == "" {
		opts.BorrowerUser = DefaultBorrowerUser
	}
	if opts.BorrowerSlots < 0 || opts.BorrowerSlots > lending.MaxExecutionsPerHost {
		return nil, fmt.Errorf("borrower slots must be between 0 and %d, not %d", lending.MaxExecutionsPerHost, opts.BorrowerSlots)
	}
	if opts.ImagesDir == "" {
		opts.ImagesDir = DefaultImagesDir
	}
	switch opts.Sandbox {
	case "":
		opts.Sandbox = SandboxRunc
	case SandboxRunc, SandboxNone:
	default:
		return nil, fmt.Errorf("sandbox must be %q or %q, not %q", SandboxRunc, SandboxNone, opts.Sandbox)
	}
	if opts.ExecutionsDir == "" {
		opts.ExecutionsDir = DefaultExecutionsDir
	}
	if opts.LoginGroup == "" {
		opts.LoginGroup = DefaultLoginGroup
	}
	paths := cleaning.DefaultPaths()
	if opts.CleaningPaths != nil {
		paths = *opts.CleaningPaths
	}
	// A login user's processes under its subordinate uids count, and end,
	// with its own: the drain evidence, a revocation and the cleaning.
	procs := sessions.Procs{Root: "/proc", SubUIDFile: paths.SubUIDFile}
	return &Agent{
		opts: opts, id: id, client: client, cred: cred, store: store,
		inventory: inventory.NewCollector(opts.DiskPath, opts.Version),
		procs:     procs,
		cleaning: &cleaning.Cleaner{Procs: procs, Grace: opts.Grace, Paths: paths,
			Command: opts.CleanCommand, CommandTimeout: opts.CleanTimeout},
		cleanings: make(chan *nodusv1.NodeCleaning, 1),
		interval:  10 * time.Second, beatNow: make(chan struct{}, 1), unrecorded: map[string]bool{},
		refused: map[string]bool{}, refusals: map[string]refusal{}, rootWarned: map[string]bool{}, termEnded: map[string]bool{},
	}, nil
}

// Defaults for borrowers' executions.
const (
	// DefaultBorrowerUser is the account executions run as.
	DefaultBorrowerUser = "nodus-borrower"
	// DefaultExecutionsDir holds their work directories.
	DefaultExecutionsDir = "/var/lib/nodus-executions"
)

// lentAgreement is the agreement of the lent one of reservations whose
// term has not ended by now and which holds node's claim, if one is, with
// the caps it leaves out filled from the host's inventory inv, as a lend
// fills them now (lending.WithHostShare): no cap is no limit to a sandbox;
// and none above what the host has (lending.HeldToHost), whatever the
// agreement says.
// Until inv is read (nil) such an agreement stays uncapped, and the runner
// starts nothing under it.
func lentAgreement(reservations []interface{}, node *nodusv1.Node, inv *nodusv1.NodeInventory, now time.Time) *nodusv1.ReservationLending {
	for _, obj := range reservations {
		// A term that ended by this host's clock lends nothing more
		// (watchTerms), whatever the server shows yet; a reservation of
		// the machine this one replaced under its name lends nothing here.
		if r := obj.(*nodusv1.Reservation); lending.Lent(r) && !termOver(r, now) && holds(node, r.Name, string(r.UID)) {
			return lending.HeldToHost(lending.WithHostShare(r.Status.Lending, inv), inv)
		}
	}
	return nil
}

// Node is the node this agent is enrolled as.
func (a *Agent) Node() string { return a.id.Node }

// Run works until ctx ends, then closes the state.
func (a *Agent) Run(ctx context.Context) error {
	defer a.store.Close()
	factory := externalversions.NewSharedInformerFactoryWithOptions(a.client, 0,
		externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "status.node=" + a.id.Node }))
	informer := factory.Nodus().V1().Reservations().Informer()
	a.reservations = informer.GetStore()
	nodeFactory := externalversions.NewSharedInformerFactoryWithOptions(a.client, 0,
		externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + a.id.Node }))
	nodeInformer := nodeFactory.Nodus().V1().Nodes().Informer()
	a.agreement = func() *nodusv1.ReservationLending {
		return lentAgreement(informer.GetStore().List(), a.node(), a.hostInventory.Load(), time.Now())
	}
	a.lent = func() bool { return a.agreement() != nil }
	box, boxErr := a.sandbox()
	// Borrowers' executions an earlier agent left end before anything else,
	// the server reachable or not: none runs past its limits, a withdrawal
	// or its host's release while nodusd cannot start.
	executions.New(executions.Options{Sandbox: box, User: a.opts.BorrowerUser, Slots: a.opts.BorrowerSlots,
		WorkRoot: a.opts.ExecutionsDir, Grace: a.opts.Grace}).Sweep(ctx)
	node, err := a.client.NodusV1().Nodes().Get(ctx, a.id.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", a.id.Node, err)
	}
	latestNode := func() *nodusv1.Node {
		if obj, ok, err := nodeInformer.GetStore().GetByKey(a.id.Node); err == nil && ok {
			return obj.(*nodusv1.Node)
		}
		return nil
	}
	a.ownNode = func() *nodusv1.Node {
		if nodeInformer.HasSynced() {
			return latestNode() // nil once the node is deleted
		}
		return node
	}
	a.runner = executions.New(executions.Options{
		Sandbox: box, SandboxError: boxErr,
		Client: a.client, Alias: lending.HostAlias(node), User: a.opts.BorrowerUser, Slots: a.opts.BorrowerSlots,
		WorkRoot: a.opts.ExecutionsDir, Grace: a.opts.Grace, Lending: a.agreement,
		OwnerUsers: func() []string {
			var users []string
			for _, obj := range informer.GetStore().List() {
				r := obj.(*nodusv1.Reservation)
				users = append(users, r.Status.LoginUser, r.Spec.LoginUser)
			}
			return users
		},
	})
	applied, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { a.observe(ctx, obj.(*nodusv1.Reservation)) },
		UpdateFunc: func(_, obj interface{}) { a.observe(ctx, obj.(*nodusv1.Reservation)) },
		// A reservation that leaves this node (deleted, moved to another, or
		// released or ended: the server shows an agent only what its node
		// serves) is retired here as a release is; a lent host's lending
		// goes with it.
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if r, ok := obj.(*nodusv1.Reservation); ok {
				a.retire(ctx, r.Name, r.UID)
			}
			a.drainUnlent(ctx)
		},
	})
	if err != nil {
		return err
	}
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A claim that leaves the node ends its lending here too: what
		// runs under it drains.
		AddFunc:    func(obj interface{}) { a.observeNode(obj.(*nodusv1.Node)); a.drainUnlent(ctx) },
		UpdateFunc: func(_, obj interface{}) { a.observeNode(obj.(*nodusv1.Node)); a.drainUnlent(ctx) },
	}); err != nil {
		return err
	}
	if a.opts.SSHDCAFile != "" {
		if err := a.installUserCA(ctx, a.opts.SSHDCAFile); err != nil {
			return fmt.Errorf("installing the SSH user CA: %w", err)
		}
	}
	if a.opts.SSHDDropIn != "" {
		if err := a.installDropIn(); err != nil {
			return fmt.Errorf("installing the sshd drop-in: %w", err)
		}
	}
	a.manageAppliedUsers()
	go func() { _ = a.servePrincipals(ctx, a.opts.Socket) }()
	factory.Start(ctx.Done())
	// The runner asks whether the host is lent: only once the reservations
	// are known, and applied (the store's sync says nothing of its
	// handlers): a reservation the list shows ended is retired by its
	// handler, not by retireGone, and a cleaning that started before it
	// would not reset what it granted.
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced, applied.HasSynced) {
		return ctx.Err()
	}
	// Reservations that left this node while the agent was down are retired now.
	a.retireGone(ctx)
	go a.recordAgain(ctx)
	go a.retryRefusals(ctx)
	go a.watchTerms(ctx)
	// Cleanings start only once the reservations are known and retired.
	go a.cleaner(ctx, latestNode)
	nodeFactory.Start(ctx.Done())
	// The runner fills an agreement's missing caps from the host's own
	// figures: read before it starts, or an execution placed under such an
	// agreement would fail for want of them (reportStatus reads them again).
	if inv, err := a.inventory.Collect(ctx); err == nil {
		a.hostInventory.Store(&inv)
	} else {
		klog.ErrorS(err, "reading the host's inventory before running executions")
	}
	go func() { _ = a.runner.Run(ctx) }()
	go a.reportStatus(ctx)
	go a.renewCertificate(ctx)
	a.heartbeats(ctx)
	// The executions were told to stop with ctx; none outlives the agent.
	a.runner.Shutdown(2*a.opts.Grace + 5*time.Second)
	factory.Shutdown()
	nodeFactory.Shutdown()
	return nil
}

// The sandboxes executions may run in.
const (
	SandboxRunc = "runc"
	SandboxNone = "none"
)

// DefaultImagesDir is where an operator places the OCI images executions
// may name: layout directories NAME/ or archives NAME.tar.
const DefaultImagesDir = "/var/lib/nodusd-images"

// sandbox is the runtime executions run in; without one (SandboxNone) they
// run unisolated, and where runc is missing they fail to start with why.
func (a *Agent) sandbox() (*sandbox.Runtime, error) {
	if a.opts.Sandbox == SandboxNone {
		klog.InfoS("borrowers' executions run without a sandbox (--sandbox none): no isolation from the host")
		return nil, nil
	}
	box, err := sandbox.Find(filepath.Join(a.opts.StateDir, "sandbox"))
	if err != nil {
		klog.ErrorS(err, "borrowers' executions cannot start on this host")
		return nil, err
	}
	box.ImagesDir = a.opts.ImagesDir
	return box, nil
}

// retireGone retires the applied access of reservations that are no longer
// on this node.
func (a *Agent) retireGone(ctx context.Context) {
	all, err := a.store.All()
	if err != nil {
		klog.ErrorS(err, "reading applied access")
		return
	}
	for _, acc := range all {
		if acc.State != state.StateRetired && !a.current(acc.Reservation) {
			a.retire(ctx, acc.Reservation, "")
		}
	}
}

// recordRootAccess keeps the ways login user can become root as the host
// is before its tenant is let in: the cleaning after it fails without a
// clean command if it could (cleaning.Cleaner.Clean), whatever the tenant
// changed meanwhile. It tells the operator, once a process, when no clean
// command is set. Called under a.applying.
func (a *Agent) recordRootAccess(user string) error {
	ways, err := a.cleaning.RootAccess(user)
	if err != nil {
		return err
	}
	if err := a.store.RecordRootAccess(user, ways); err != nil {
		return err
	}
	if len(ways) > 0 && a.opts.CleanCommand == "" && !a.rootWarned[user] {
		a.rootWarned[user] = true
		klog.InfoS("WARNING: the login user can become root and no clean command is set; the cleaning after its tenant will fail and put the node in maintenance. Set --clean-command (a re-image) or take those rights away (docs/handover.md)",
			"user", user, "ways", ways)
	}
	return nil
}

// manageAppliedUsers keeps the login users of granted access in the login
// group (a drop-in installed after they were granted, or a group removed by hand).
func (a *Agent) manageAppliedUsers() {
	all, err := a.store.All()
	if err != nil {
		return
	}
	for _, acc := range all {
		if acc.Granted() && acc.LoginUser != "" {
			if err := a.manageLoginUser(acc.LoginUser); err != nil {
				klog.ErrorS(err, "making the login user certificate-only", "user", acc.LoginUser)
			}
		}
	}
}

// observe applies a reservation's access and drains borrowers' executions
// once the host is no longer lent (withdrawn, released or ended).
func (a *Agent) observe(ctx context.Context, r *nodusv1.Reservation) {
	a.apply(ctx, r)
	a.drainUnlent(ctx)
}

func (a *Agent) drainUnlent(ctx context.Context) {
	if !a.lent() {
		if a.runner.Active() {
			a.runner.StartDrain(ctx, "the host is no longer lent: its owner withdrew it, its reservation ended, or the reservation no longer holds this machine")
		}
		return
	}
	// Lent again with smaller caps: what runs beyond them stops.
	a.runner.Trim()
}

// apply applies a reservation's access state if its epoch is newer than the
// one applied: on retirement it first records the denial (new logins are
// refused from then on), then ends the login user's processes and drains
// borrowers' executions, then asks for a heartbeat that acknowledges the epoch.
func (a *Agent) apply(ctx context.Context, r *nodusv1.Reservation) {
	a.applying.Lock()
	defer a.applying.Unlock()
	// Its name becomes the principal sshd accepts: a name, one line.
	if msgs := utilvalidation.IsDNS1123Subdomain(r.Name); len(msgs) > 0 {
		klog.ErrorS(errors.New(strings.Join(msgs, "; ")), "refusing a reservation whose name is no name", "reservation", r.Name)
		return
	}
	// So is its UID, which tells it from another of the same name.
	if !sshvalue.CanonicalUID(r.UID) {
		klog.ErrorS(errors.New("not a UUID in canonical form"), "refusing a reservation whose UID is no UID", "reservation", r.Name, "uid", r.UID)
		return
	}
	loginUser := r.Status.LoginUser
	if loginUser == "" {
		loginUser = r.Spec.LoginUser
	}
	desired := state.Access{Reservation: r.Name, UID: string(r.UID), Epoch: r.Status.Epoch, State: string(r.Status.State),
		LoginUser: loginUser, Project: r.Spec.Project}
	previous, _, err := a.store.Applied(r.Name)
	if err != nil {
		a.unrecordable(ctx, desired, fmt.Errorf("reading applied access: %w", err))
		return
	}
	if !desired.Granted() {
		desired.LoginUser = a.retiredLoginUser(previous, desired)
	}
	if desired.Granted() {
		// No one else while a tenant's leftovers may be on the host (the
		// store checks again as it records the grant); then certificate-only
		// before the first principal is served, and never root, a system
		// account or a borrower account (manageLoginUser).
		err := a.store.MayGrant(desired)
		refusal, logged, owed := owedRefusal(err)
		switch {
		case owed:
			err = refusal
		case err != nil:
			a.unrecordable(ctx, desired, err)
			return
		default:
			err = a.manageLoginUser(loginUser)
		}
		if err != nil {
			a.refuse(r.Name, r.UID, loginUser, desired.Epoch, err, logged...)
			if previous.Granted() && (desired.Epoch > previous.Epoch || anotherObject(previous, desired)) {
				// The access this state changes ends all the same: its
				// principal, of the old epoch, and its sessions must not
				// outlive the change.
				a.mu.Lock()
				first := !a.refused[r.Name]
				a.refused[r.Name] = true
				a.mu.Unlock()
				if first && !a.neverATenants(previous.LoginUser) && !a.userStillGranted(previous.LoginUser) {
					a.endSessions(ctx, previous.LoginUser)
				}
			}
			return
		}
	}
	a.mu.Lock()
	delete(a.refusals, r.Name)
	a.mu.Unlock()
	if desired.Granted() {
		// Before the tenant is let in: what it could change after is not
		// what the cleaning may trust.
		if err := a.recordRootAccess(loginUser); err != nil {
			a.unrecordable(ctx, desired, fmt.Errorf("recording how the login user could become root: %w", err))
			return
		}
	}
	applied, err := a.store.Apply(desired)
	if refusal, logged, owed := owedRefusal(err); owed {
		// Owed since MayGrant looked: tried again every retryRefusalsEvery.
		a.refuse(r.Name, r.UID, loginUser, desired.Epoch, refusal, logged...)
		return
	}
	if err != nil {
		a.unrecordable(ctx, desired, err)
		return
	}
	a.setUnrecorded(r.Name, false)
	a.mu.Lock()
	delete(a.refused, r.Name)
	a.mu.Unlock()
	if !applied {
		return // not newer: an old or repeated state never counts
	}
	klog.InfoS("applied access", "reservation", r.Name, "epoch", desired.Epoch, "state", desired.State)
	if desired.Granted() && previous.Granted() && previous.LoginUser != "" && previous.LoginUser != desired.LoginUser {
		// A login-user change retires the old account as a release would:
		// its principals are gone (the new epoch), its sessions end, and what
		// it leaves is reset.
		if err := a.refuseLoginUser(previous.LoginUser); err != nil {
			klog.ErrorS(err, "not resetting the previous login user", "user", previous.LoginUser)
		} else if a.userStillGranted(previous.LoginUser) {
			klog.InfoS("not resetting the previous login user: another access uses it", "user", previous.LoginUser)
		} else if steps, err := a.cleaning.ResetAccount(ctx, previous.LoginUser); err != nil {
			klog.ErrorS(err, "resetting the previous login user", "user", previous.LoginUser)
		} else {
			klog.InfoS("reset the previous login user", "user", previous.LoginUser, "steps", steps)
		}
	}
	if !desired.Granted() {
		for _, user := range []string{previous.LoginUser, desired.LoginUser} {
			// Only a login user's sessions: not a service's, whatever the
			// server names, nor those of an account another access on this
			// node grants now (a deleted node's reservation, listed here
			// after a machine took its name, ending beside the one holding
			// the node with the same login user).
			if user != "" && !a.neverATenants(user) && !a.userStillGranted(user) {
				a.endTenancy(ctx, user)
			}
		}
		if !a.lent() {
			a.runner.Drain(ctx, fmt.Sprintf("the host's reservation is %s: lending drained", desired.State))
		}
	}
	a.beatSoon()
}

// unrecordable handles an access state the state database did not take.
// The agent fails closed: the reservation's principals are refused from now
// on (servePrincipals), a retirement ends the login user's sessions as a
// recorded one does, and recordAgain writes it again. Heartbeats report the
// epoch recorded, so the server waits for the record.
func (a *Agent) unrecordable(ctx context.Context, desired state.Access, err error) {
	klog.ErrorS(err, "recording access failed: its principals are refused until it is recorded", "reservation", desired.Reservation,
		"epoch", desired.Epoch, "state", desired.State)
	a.setUnrecorded(desired.Reservation, true)
	if !desired.Granted() && desired.LoginUser != "" && !a.neverATenants(desired.LoginUser) && !a.userStillGranted(desired.LoginUser) {
		a.endTenancy(ctx, desired.LoginUser)
	}
}

func (a *Agent) setUnrecorded(reservation string, unrecorded bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if unrecorded {
		a.unrecorded[reservation] = true
	} else {
		delete(a.unrecorded, reservation)
	}
}

// holds says whether node's claim is the reservation's (name and UID; a
// claim written before claims carried a UID names it alone), as
// lifecycle.Holds for a reservation on node. Access follows the claim, not
// the node's name: a machine enrolled under the name of one the operator
// deleted lists that one's reservations, and is not theirs until one of
// them claims it.
func holds(node *nodusv1.Node, reservation, uid string) bool {
	return node != nil && node.Status.Reservation == reservation &&
		(node.Status.ReservationUID == "" || string(node.Status.ReservationUID) == uid)
}

// node is the agent's Node as it knows it now; nil before Run read it.
func (a *Agent) node() *nodusv1.Node {
	if a.ownNode == nil {
		return nil
	}
	return a.ownNode()
}

// claimed says whether the agent's node, as it knows it now, is held by
// the reservation of acc.
func (a *Agent) claimed(acc state.Access) bool { return holds(a.node(), acc.Reservation, acc.UID) }

// anotherObject says whether desired is of a later object of previous'
// name than previous (one deleted and made again under it).
func anotherObject(previous, desired state.Access) bool {
	return previous.UID != "" && desired.UID != "" && previous.UID != desired.UID && !slices.Contains(previous.ReplacedUIDs, desired.UID)
}

// withheld says whether the reservation's recorded access is not to be
// served: its newest state is not recorded yet, or is refused.
func (a *Agent) withheld(reservation string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unrecorded[reservation] || a.refused[reservation] || a.termEnded[reservation]
}

// termEndedHere says whether the reservation's term ended by this host's
// clock while the server still showed it active (watchTerms).
func (a *Agent) termEndedHere(reservation string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.termEnded[reservation]
}

// recordAgain writes again, every second, the access states the state
// database did not take: the reservation's as the informer has it now, or
// its retirement when it left this node.
func (a *Agent) recordAgain(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		a.mu.Lock()
		names := make([]string, 0, len(a.unrecorded))
		for name := range a.unrecorded {
			names = append(names, name)
		}
		a.mu.Unlock()
		for _, name := range names {
			obj, ok, err := a.reservations.GetByKey(name)
			switch {
			case err != nil:
			case ok:
				a.apply(ctx, obj.(*nodusv1.Reservation))
			default:
				a.retire(ctx, name, "")
			}
		}
	}
}

// reportStatus writes the inventory, host key and address to the Node when
// they change, re-reading them every InventoryEvery. A report that failed
// is sent again after 1 s, 2 s, … up to InventoryEvery: until it lands, a
// new node has nothing to be placed by and no host key to check.
func (a *Agent) reportStatus(ctx context.Context) {
	failedWait := time.Second
	for {
		wait := a.opts.InventoryEvery
		if err := a.report(ctx); err != nil {
			if !outcome.Final(err) {
				wait = min(failedWait, wait)
				failedWait *= 2
			}
			klog.ErrorS(err, "reporting the inventory", "retryIn", wait)
		} else {
			failedWait = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (a *Agent) report(ctx context.Context) error {
	inv, err := a.inventory.Collect(ctx)
	if err != nil {
		return err
	}
	a.hostInventory.Store(&inv)
	hostKey := ""
	if a.opts.SSHHostKey != "" {
		if hostKey, err = inventory.HostKey(a.opts.SSHHostKey); err != nil {
			return err
		}
	}
	nodes := a.client.NodusV1().Nodes()
	n, err := nodes.Get(ctx, a.id.Node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	slots := int32(a.opts.BorrowerSlots)
	if equality.Semantic.DeepEqual(n.Status.Inventory, inv) && n.Status.SSHHostKey == hostKey && n.Status.SSHAddress == a.opts.SSHAddress &&
		n.Status.ExecutionSlots == slots {
		return nil
	}
	patch, err := ownStatusPatch(inv, hostKey, a.opts.SSHAddress, slots)
	if err != nil {
		return err
	}
	_, err = nodes.Patch(ctx, a.id.Node, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "nodusd"}, "status")
	return err
}

// ownStatusPatch is the JSON patch that writes the status fields an agent
// reports, and no other. A whole-status update would write back every field
// as this build decodes it: one a newer server added (a claim's UID, say)
// would reach the server empty, and the write be refused as changing a
// field the server owns, freezing the node's reports until the agent is
// upgraded. Each field is set whole ("add" replaces a member), so what the
// inventory no longer has is gone from it.
func ownStatusPatch(inv nodusv1.NodeInventory, hostKey, address string, slots int32) ([]byte, error) {
	type op struct {
		Op    string      `json:"op"`
		Path  string      `json:"path"`
		Value interface{} `json:"value"`
	}
	return json.Marshal([]op{
		{"add", "/status/inventory", inv},
		{"add", "/status/sshHostKey", hostKey},
		{"add", "/status/sshAddress", address},
		{"add", "/status/executionSlots", slots},
	})
}
