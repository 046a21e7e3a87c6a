package validation

import (
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

var (
	jan = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	dec = metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
)

// fields renders the paths of errs, sorted, for comparison.
func fields(errs field.ErrorList) string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Field)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestValidate(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "ok"}
	reservation := func(mut func(*nodusv1.Reservation)) field.ErrorList {
		r := &nodusv1.Reservation{ObjectMeta: meta, Spec: nodusv1.ReservationSpec{
			Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "gpu-001"}, StartsAt: jan, EndsAt: dec, LoginUser: "ubuntu"}}
		mut(r)
		return ValidateReservation(r)
	}
	cases := map[string]struct {
		errs field.ErrorList
		want string
	}{
		"valid reservation": {reservation(func(*nodusv1.Reservation) {}), ""},
		"term backwards":    {reservation(func(r *nodusv1.Reservation) { r.Spec.StartsAt, r.Spec.EndsAt = dec, jan }), "spec.endsAt"},
		"term missing":      {reservation(func(r *nodusv1.Reservation) { r.Spec.StartsAt, r.Spec.EndsAt = metav1.Time{}, metav1.Time{} }), "spec.endsAt spec.startsAt"},
		"two placements":    {reservation(func(r *nodusv1.Reservation) { r.Spec.Placement.Allocation = "a1" }), "spec.placement"},
		"traits without class": {reservation(func(r *nodusv1.Reservation) { r.Spec.Placement.Traits = []string{"CUSTOM_X"} }),
			"spec.placement.traits"},
		"root login":        {reservation(func(r *nodusv1.Reservation) { r.Spec.LoginUser = "root" }), "spec.loginUser"},
		"bad login":         {reservation(func(r *nodusv1.Reservation) { r.Spec.LoginUser = "Bad User" }), "spec.loginUser"},
		"project not label": {reservation(func(r *nodusv1.Reservation) { r.Spec.Project = "a.b" }), "spec.project"},
		// Its ReservedHost's label names it: a longer name would never
		// get a host.
		"a name too long to label its host": {ValidateNewReservation(&nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 64)},
			Spec: nodusv1.ReservationSpec{Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "gpu-001"}, StartsAt: jan, EndsAt: dec}}), "metadata.name"},
		"a name as long as a label": {ValidateNewReservation(&nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 63)},
			Spec: nodusv1.ReservationSpec{Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "gpu-001"}, StartsAt: jan, EndsAt: dec}}), ""},
		"node traits": {ValidateNode(&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu",
			Traits: []string{"CUSTOM_A", "lower", "CUSTOM_A"}}}), "spec.traits[1] spec.traits[2]"},
		"node class and pool missing": {ValidateNode(&nodusv1.Node{ObjectMeta: meta}), "spec.pool spec.resourceClass"},
		"node owner longer than Ironic's": {ValidateNode(&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu",
			Owner: strings.Repeat("o", 256)}}), "spec.owner"},
		"node owner as long as Ironic's": {ValidateNode(&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu",
			Owner: strings.Repeat("o", 255)}}), ""},
		"a node's long owner stored before the bound, kept": {ValidateNodeUpdate(
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Owner: strings.Repeat("o", 256), Maintenance: true}},
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Owner: strings.Repeat("o", 256)}}), ""},
		"a node's owner changed to a long one": {ValidateNodeUpdate(
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Owner: strings.Repeat("o", 257)}},
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Owner: strings.Repeat("o", 256)}}), "spec.owner"},
		"node extra past Ironic's column": {ValidateNode(&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu",
			Extra: map[string]string{"a": strings.Repeat("x", 40<<10), "b": strings.Repeat("x", 40<<10)}}}), "spec.extra"},
		"node extra as large as Ironic's column": {ValidateNode(&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu",
			Extra: map[string]string{"a": strings.Repeat("x", 64<<10-1)}}}), ""},
		"a node's large extra stored before the bound, kept": {ValidateNodeUpdate(
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Extra: map[string]string{"a": strings.Repeat("x", 80<<10)}, Maintenance: true}},
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Extra: map[string]string{"a": strings.Repeat("x", 80<<10)}}}), ""},
		"a node's extra grown past the bound": {ValidateNodeUpdate(
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Extra: map[string]string{"a": strings.Repeat("x", 40<<10), "b": strings.Repeat("x", 40<<10)}}},
			&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", Extra: map[string]string{"a": strings.Repeat("x", 40<<10)}}}), "spec.extra"},
		"an allocation's large extra stored before the bound, kept": {ValidateAllocationUpdate(
			&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu", IronicName: "renamed", Extra: map[string]string{"a": strings.Repeat("x", 80<<10)}}},
			&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu", Extra: map[string]string{"a": strings.Repeat("x", 80<<10)}}}), ""},
		"an allocation's extra grown past the bound": {ValidateAllocationUpdate(
			&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu", Extra: map[string]string{"a": strings.Repeat("x", 80<<10)}}},
			&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu"}}), "spec.extra"},
		"allocation extra past Ironic's column": {ValidateNewAllocation(&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu",
			Extra: map[string]string{"a": strings.Repeat("x", 65<<10)}}}), "spec.extra"},
		"maintenance reason without maintenance": {ValidateNode(&nodusv1.Node{ObjectMeta: meta, Spec: nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu",
			MaintenanceReason: "x"}}), "spec.maintenanceReason"},
		"allocation without class or node":   {ValidateAllocation(&nodusv1.Allocation{ObjectMeta: meta}), "spec.resourceClass"},
		"allocation backfill needs no class": {ValidateAllocation(&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{Node: "gpu-001"}}), ""},
		"allocation Ironic name": {ValidateAllocation(&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu",
			IronicName: "Web_Server.1~a"}}), ""},
		"allocation bad Ironic name": {ValidateAllocation(&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu",
			IronicName: "[test]"}}), "spec.ironicName"},
		"allocation duplicate candidates": {ValidateAllocation(&nodusv1.Allocation{ObjectMeta: meta, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu",
			CandidateNodes: []string{"a", "a"}}}), "spec.candidateNodes[1]"},
		"project members": {ValidateProject(&nodusv1.Project{ObjectMeta: meta, Spec: nodusv1.ProjectSpec{Members: []nodusv1.ProjectMember{
			{Kind: nodusv1.MemberKindUser, Name: "a", Role: "owner"}, {Kind: "Robot", Name: "", Role: nodusv1.ProjectRoleAdmin},
			{Kind: nodusv1.MemberKindUser, Name: "a", Role: nodusv1.ProjectRoleViewer}}}}),
			"spec.members[0].role spec.members[1].kind spec.members[1].name spec.members[2]"},
		"project name with dot": {ValidateProject(&nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "a.b"}}), "metadata.name"},
		"token needs a user":    {ValidateAccessToken(&nodusv1.AccessToken{ObjectMeta: meta}), "spec.user"},
		// What an agent reports lands in another tenant's (or the
		// operator's) terminal: no escape sequence gets through.
		"report with lines and tabs": {ValidateExecutionReport(&nodusv1.ExecutionReport{Message: "exit 1:\n\tout of memory — é"}), ""},
		"report with an escape":      {ValidateExecutionReport(&nodusv1.ExecutionReport{Message: "done\x1b]52;c;cm0gLXJmIH4=\x07"}), "message"},
		"report with a C1 CSI":       {ValidateExecutionReport(&nodusv1.ExecutionReport{Message: "done\u009b2J"}), "message"},
		"report not UTF-8":           {ValidateExecutionReport(&nodusv1.ExecutionReport{Message: "done\xff"}), "message"},
		"cleaning with escapes": {ValidateCleaningReport([]string{"ok", "reset\x1b[2K"}, "a\rb", "wiped\x1b[31m\n", field.NewPath("c")),
			"c.commandOutput c.message c.steps[1]"},
		"cleaning output too long": {ValidateCleaningReport(nil, "", strings.Repeat("x", MaxCleaningOutput+1), field.NewPath("c")), "c.commandOutput"},
	}
	for name, tc := range cases {
		if got := fields(tc.errs); got != tc.want {
			t.Errorf("%s: error fields %q, want %q (%v)", name, got, tc.want, tc.errs)
		}
	}
}

func TestReservedHostStatus(t *testing.T) {
	host := func() *nodusv1.ReservedHost {
		return &nodusv1.ReservedHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "acme"}, Status: nodusv1.ReservedHostStatus{
			Reservation: nodusv1.HostReservation{Project: "acme", StartsAt: jan, EndsAt: dec, LoginUser: "ubuntu", Epoch: 4, State: nodusv1.ReservationStateActive}}}
	}
	if errs := ValidateReservedHost(host()); len(errs) != 0 {
		t.Fatalf("valid host: %v", errs)
	}
	lower := host()
	lower.Status.Reservation.Epoch = 3
	if got := fields(ValidateReservedHostStatus(lower, host())); got != "status.reservation.epoch" {
		t.Errorf("decreasing epoch: %q", got)
	}
	released := host()
	released.Status.Release = &nodusv1.ReservedHostReleaseStatus{RequestedAt: jan}
	moved := released.DeepCopy()
	moved.Status.Reservation.EndsAt = metav1.NewTime(dec.Add(time.Hour))
	if got := fields(ValidateReservedHostStatus(moved, released)); got != "status.reservation.endsAt" {
		t.Errorf("a release must never change endsAt: %q", got)
	}
	other := host()
	other.Status.Reservation.Project = "other"
	if got := fields(ValidateReservedHost(other)); got != "status.reservation.project" {
		t.Errorf("project outside its namespace: %q", got)
	}
}

// TestANodesAgentGenerationNeverGoesBack: a status written from an old
// manifest lowered it, and the retired credential of that generation was
// accepted again.
func TestANodesAgentGenerationNeverGoesBack(t *testing.T) {
	node := func(generation int64) *nodusv1.Node {
		return &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: nodusv1.NodeStatus{AgentGeneration: generation}}
	}
	if got := fields(ValidateNodeStatusUpdate(node(3), node(4))); got != "status.agentGeneration" {
		t.Errorf("lowered: %q", got)
	}
	for _, next := range []int64{4, 5} {
		if errs := ValidateNodeStatusUpdate(node(next), node(4)); len(errs) != 0 {
			t.Errorf("%d over 4: %v", next, errs)
		}
	}
}

// TestAnEnrollmentTokenKeepsWhatItWasIssuedFor: an update moved a used
// token to another node or pool, and a status write cleared its use, so it
// enrolled again.
func TestAnEnrollmentTokenKeepsWhatItWasIssuedFor(t *testing.T) {
	issued := &nodusv1.EnrollmentToken{ObjectMeta: metav1.ObjectMeta{Name: "t"},
		Spec:   nodusv1.EnrollmentTokenSpec{Pool: "fra1", NodeName: "n1", ResourceClass: "gpu", ExpiresAt: &dec},
		Status: nodusv1.EnrollmentTokenStatus{TokenHash: "h", UsedBy: "n1", UsedAt: &jan, NodeUID: "u", AgentGeneration: 2}}
	if errs := ValidateEnrollmentTokenUpdate(issued, issued); len(errs) != 0 {
		t.Fatalf("unchanged: %v", errs)
	}
	sooner := issued.DeepCopy()
	sooner.Spec.ExpiresAt = &jan
	if errs := ValidateEnrollmentTokenUpdate(sooner, issued); len(errs) != 0 {
		t.Errorf("a new expiry: %v", errs)
	}
	for name, change := range map[string]func(*nodusv1.EnrollmentToken){
		"node": func(t *nodusv1.EnrollmentToken) { t.Spec.NodeName = "n2" },
		"pool": func(t *nodusv1.EnrollmentToken) { t.Spec.Pool = "other" },
	} {
		moved := issued.DeepCopy()
		change(moved)
		if got := fields(ValidateEnrollmentTokenUpdate(moved, issued)); got != "spec" {
			t.Errorf("another %s: %q", name, got)
		}
	}
	for want, change := range map[string]func(*nodusv1.EnrollmentToken){
		"status.usedAt":          func(t *nodusv1.EnrollmentToken) { t.Status.UsedAt = nil },
		"status.usedBy":          func(t *nodusv1.EnrollmentToken) { t.Status.UsedBy = "" },
		"status.tokenHash":       func(t *nodusv1.EnrollmentToken) { t.Status.TokenHash = "mine" },
		"status.nodeUID":         func(t *nodusv1.EnrollmentToken) { t.Status.NodeUID = "other" },
		"status.agentGeneration": func(t *nodusv1.EnrollmentToken) { t.Status.AgentGeneration = 1 },
	} {
		reset := issued.DeepCopy()
		change(reset)
		if got := fields(ValidateEnrollmentTokenStatus(reset, issued)); got != want {
			t.Errorf("%s changed: %q", want, got)
		}
	}
	fresh := issued.DeepCopy()
	fresh.Status = nodusv1.EnrollmentTokenStatus{TokenHash: "h"}
	if errs := ValidateEnrollmentTokenStatus(issued, fresh); len(errs) != 0 {
		t.Errorf("the first use recorded: %v", errs)
	}
}

func TestANodeClaimsUIDGoesWithItsName(t *testing.T) {
	n := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: nodusv1.NodeStatus{ReservationUID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}
	if got := fields(ValidateNodeStatus(n)); got != "status.reservationUID" {
		t.Errorf("a claim's UID without its reservation: %q", got)
	}
	n.Status.Reservation = "r1"
	if got := fields(ValidateNodeStatus(n)); got != "" {
		t.Errorf("a claim with its UID: %q", got)
	}
	n.Status.AllocationUID = "2c5f39cb-3fb2-11d2-883f-0016d3cca427"
	if got := fields(ValidateNodeStatus(n)); got != "status.allocationUID" {
		t.Errorf("an allocation's UID without its allocation: %q", got)
	}
	n.Status.Allocation = "a1"
	if got := fields(ValidateNodeStatus(n)); got != "" {
		t.Errorf("an allocation's claim with its UID: %q", got)
	}
}

func TestWithoutTerminalControlsMakesReportsAcceptable(t *testing.T) {
	for _, in := range []string{"\x1b[2J\x1b]0;owned\x07", "a\rb\x7f\u009b", "bad \xff utf-8", "fine\n\tline"} {
		out := WithoutTerminalControls(in)
		if errs := ValidateExecutionReport(&nodusv1.ExecutionReport{Message: out}); len(errs) > 0 {
			t.Errorf("WithoutTerminalControls(%q) = %q: still refused: %v", in, out, errs)
		}
	}
	if got := WithoutTerminalControls("fine\n\tline"); got != "fine\n\tline" {
		t.Errorf("newlines and tabs must stay: %q", got)
	}
}

// TestATermTheControllerActedOnStays: the controller never takes access
// back for a start moved later once it gave it, nor gives it again for an
// end moved later once access is ending. Such a change was accepted and
// silently ignored; it is refused now, so that what the object says is
// what happens.
func TestATermTheControllerActedOnStays(t *testing.T) {
	later := metav1.NewTime(dec.Add(24 * time.Hour))
	reservation := func(state nodusv1.ReservationState, startsAt, endsAt metav1.Time) *nodusv1.Reservation {
		return &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1", ResourceVersion: "7"},
			Spec:   nodusv1.ReservationSpec{Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "gpu-1"}, StartsAt: startsAt, EndsAt: endsAt},
			Status: nodusv1.ReservationStatus{State: state}}
	}
	for _, c := range []struct {
		state            nodusv1.ReservationState
		startsAt, endsAt metav1.Time
		want             string
	}{
		{"", dec, later, ""},
		{nodusv1.ReservationStatePending, dec, later, ""},
		{nodusv1.ReservationStateActive, jan, later, ""},
		{nodusv1.ReservationStateActive, jan, metav1.NewTime(jan.Add(time.Hour)), ""},
		{nodusv1.ReservationStateActive, metav1.NewTime(jan.Add(time.Hour)), dec, "spec.startsAt"},
		{nodusv1.ReservationStateEnding, jan, later, "spec.endsAt"},
		{nodusv1.ReservationStateEnded, metav1.NewTime(jan.Add(-time.Hour)), later, "spec.endsAt spec.startsAt"},
		{nodusv1.ReservationStateEnded, jan, dec, ""},
	} {
		old := reservation(c.state, jan, dec)
		if got := fields(ValidateReservationUpdate(reservation(c.state, c.startsAt, c.endsAt), old)); got != c.want {
			t.Errorf("%q, the term moved to %s – %s: errors at %q, want %q", c.state, c.startsAt.UTC(), c.endsAt.UTC(), got, c.want)
		}
	}
}

// TestAnExecutionsRefusalsDoNotRepeatItsEnvironment: an execution's
// environment (and its arguments) are where a borrower keeps its secrets, and a refusal's text
// reaches the caller's terminal and the audit log, which keeps a request's
// errors at every level.
func TestAnExecutionsRefusalsDoNotRepeatItsEnvironment(t *testing.T) {
	const secret = "hunter2-api-key"
	e := &nodusv1.Execution{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "beta"},
		Spec: nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"train", "--key=" + secret + "\x00"}, MaxRuntimeSeconds: 60,
			Env: []nodusv1.ExecutionEnv{{Name: "TOKEN", Value: secret + "\x00"}}},
	}
	errs := ValidateExecution(e)
	if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "NUL") {
		t.Fatalf("a NUL in an environment value: %v", errs)
	}
	if strings.Contains(errs.ToAggregate().Error(), secret) {
		t.Errorf("the refusal of a NUL repeats the value: %v", errs)
	}

	old := e.DeepCopy()
	old.Spec.Env[0].Value = secret
	next := old.DeepCopy()
	next.Spec.Env[0].Value = secret + "-rotated"
	errs = ValidateExecutionUpdate(next, old)
	if len(errs) == 0 {
		t.Fatal("a changed spec was taken")
	}
	if msg := errs.ToAggregate().Error(); strings.Contains(msg, secret) {
		t.Errorf("the refusal of a changed spec repeats the environment: %v", msg)
	}
}

// TestAReservationsStatusOnlyMovesForward: a status write (an operator's
// patch of the status subresource, an apply of an old manifest) made a
// released reservation active again at its epoch: the controller claimed
// its node again, and members got SSH certificates. A release is
// irreversible, and a term that ended does not begin again.
func TestAReservationsStatusOnlyMovesForward(t *testing.T) {
	at := func(state nodusv1.ReservationState, released bool) *nodusv1.Reservation {
		r := &nodusv1.Reservation{Status: nodusv1.ReservationStatus{State: state, Epoch: 3}}
		if released {
			r.Status.Release = &nodusv1.ReservedHostReleaseStatus{RequestedAt: jan}
		}
		return r
	}
	const (
		pending   = nodusv1.ReservationStatePending
		active    = nodusv1.ReservationStateActive
		releasing = nodusv1.ReservationStateReleasing
		released  = nodusv1.ReservationStateReleased
		ending    = nodusv1.ReservationStateEnding
		ended     = nodusv1.ReservationStateEnded
	)
	for _, tc := range []struct {
		from, to nodusv1.ReservationState
		ok       bool
	}{
		{"", pending, true}, {pending, active, true}, {pending, ended, true}, {active, releasing, true}, {active, ending, true},
		{releasing, released, true}, {ending, ended, true}, {active, active, true}, {released, released, true},
		{active, pending, false}, {releasing, active, false}, {released, active, false}, {released, releasing, false},
		{ending, active, false}, {ended, active, false}, {ended, pending, false}, {ended, ending, false},
		{releasing, ending, false}, {released, ended, false}, {ending, releasing, false}, {ended, released, false},
	} {
		wasReleased := tc.from == releasing || tc.from == released
		isReleased := tc.to == releasing || tc.to == released
		// The release kept as it was: each refusal here is the state's own.
		errs := ValidateReservationStatus(at(tc.to, isReleased || wasReleased), at(tc.from, wasReleased))
		if (len(errs) == 0) != tc.ok {
			t.Errorf("%q → %q: %v, want allowed %v", tc.from, tc.to, errs, tc.ok)
		}
	}
	// The release stays as it was recorded.
	undone := at(released, false)
	if got := fields(ValidateReservationStatus(undone, at(released, true))); got != "status.release" {
		t.Errorf("a release removed: %q", got)
	}
	moved := at(released, true)
	moved.Status.Release.RequestedAt = dec
	if got := fields(ValidateReservationStatus(moved, at(released, true))); got != "status.release.requestedAt" {
		t.Errorf("a release's time moved: %q", got)
	}
	host := &nodusv1.ReservedHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "acme"}, Status: nodusv1.ReservedHostStatus{
		Reservation: nodusv1.HostReservation{Project: "acme", StartsAt: jan, EndsAt: dec, LoginUser: "ubuntu", Epoch: 4, State: released},
		Release:     &nodusv1.ReservedHostReleaseStatus{RequestedAt: jan}}}
	unreleased := host.DeepCopy()
	unreleased.Status.Release = nil
	unreleased.Status.Reservation.State = active
	if got := fields(ValidateReservedHostStatus(unreleased, host)); got != "status.release status.reservation.state" {
		t.Errorf("a host's release undone: %q", got)
	}
}
