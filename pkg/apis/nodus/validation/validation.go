// Package validation checks nodus.dev/v1 objects and reports every problem
// with its field path, so that a 422 names each field to fix.
package validation

import (
	"fmt"
	"maps"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
	"github.com/nodus-dev/nodus/pkg/terminalsafe"
)

var (
	// resourceClassPattern follows Ironic: printable, no spaces, at most 80 characters.
	resourceClassPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$`)
	// traitPattern is Ironic's: a standard trait (upper case, digits, underscores)
	// or a CUSTOM_ trait, at most 255 characters.
	traitPattern = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,254}$`)
	// loginUserPattern is the portable POSIX user name as useradd accepts it.
	loginUserPattern = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// MaxLogDroppedBytes bounds the output an agent says an execution dropped.
const MaxLogDroppedBytes = 1 << 60

// MaxCandidates is how many candidate nodes an allocation may name.
const MaxCandidates = 1000

const (
	maxTraits        = 50
	maxMembers       = 500
	maxFreeTextBytes = 1024
)

// ValidateProject checks a Project. Its name is a namespace name, so it must be a DNS label.
func ValidateProject(p *nodusv1.Project) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&p.ObjectMeta, false, apimachineryvalidation.ValidateNamespaceName, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	errs = append(errs, validateFreeText(p.Spec.DisplayName, spec.Child("displayName"))...)
	members := spec.Child("members")
	if len(p.Spec.Members) > maxMembers {
		errs = append(errs, field.TooMany(members, len(p.Spec.Members), maxMembers))
	}
	seen := sets.New[string]()
	for i, m := range p.Spec.Members {
		path := members.Index(i)
		switch m.Kind {
		case nodusv1.MemberKindUser, nodusv1.MemberKindGroup:
		default:
			errs = append(errs, field.NotSupported(path.Child("kind"), m.Kind, []string{string(nodusv1.MemberKindUser), string(nodusv1.MemberKindGroup)}))
		}
		if m.Name == "" {
			errs = append(errs, field.Required(path.Child("name"), "the user or group name"))
		} else if len(m.Name) > 253 {
			errs = append(errs, field.TooLong(path.Child("name"), "", 253))
		}
		switch m.Role {
		case nodusv1.ProjectRoleAdmin, nodusv1.ProjectRoleMember, nodusv1.ProjectRoleViewer:
		default:
			errs = append(errs, field.NotSupported(path.Child("role"), m.Role, []string{string(nodusv1.ProjectRoleAdmin), string(nodusv1.ProjectRoleMember), string(nodusv1.ProjectRoleViewer)}))
		}
		key := string(m.Kind) + "/" + m.Name
		if seen.Has(key) {
			errs = append(errs, field.Duplicate(path, key))
		}
		seen.Insert(key)
	}
	return errs
}

// ValidatePool checks a Pool.
func ValidatePool(p *nodusv1.Pool) field.ErrorList {
	errs := validateClusterMeta(&p.ObjectMeta)
	spec := field.NewPath("spec")
	errs = append(errs, validateFreeText(p.Spec.DisplayName, spec.Child("displayName"))...)
	errs = append(errs, validateFreeText(p.Spec.Supplier, spec.Child("supplier"))...)
	errs = append(errs, validateFreeText(p.Spec.Location, spec.Child("location"))...)
	errs = append(errs, validatePoolLending(p.Spec.Lending, spec.Child("lending"))...)
	return errs
}

// ValidateNode checks a Node's spec and metadata.
func ValidateNode(n *nodusv1.Node) field.ErrorList {
	errs := append(validateNodeBesidesOwner(n), validateNodeOwner(n)...)
	return append(errs, validateExtra(n.Spec.Extra, field.NewPath("spec", "extra"))...)
}

// ValidateNodeUpdate is ValidateNode for an update of old: an owner stored
// before its bound stays until it changes, so that the node's other
// changes (maintenance, the operator's annotations) are not refused for it.
func ValidateNodeUpdate(n, old *nodusv1.Node) field.ErrorList {
	errs := validateNodeBesidesOwner(n)
	if n.Spec.Owner != old.Spec.Owner {
		errs = append(errs, validateNodeOwner(n)...)
	}
	if !maps.Equal(n.Spec.Extra, old.Spec.Extra) {
		errs = append(errs, validateExtra(n.Spec.Extra, field.NewPath("spec", "extra"))...)
	}
	return errs
}

func validateNodeBesidesOwner(n *nodusv1.Node) field.ErrorList {
	errs := validateClusterMeta(&n.ObjectMeta)
	spec := field.NewPath("spec")
	errs = append(errs, validateReferenceName(n.Spec.Pool, spec.Child("pool"), true)...)
	errs = append(errs, validateResourceClass(n.Spec.ResourceClass, spec.Child("resourceClass"), true)...)
	errs = append(errs, validateTraits(n.Spec.Traits, spec.Child("traits"))...)
	errs = append(errs, validateFreeText(n.Spec.MaintenanceReason, spec.Child("maintenanceReason"))...)
	if n.Spec.MaintenanceReason != "" && !n.Spec.Maintenance {
		errs = append(errs, field.Invalid(spec.Child("maintenanceReason"), n.Spec.MaintenanceReason, "may only be set while maintenance is true"))
	}
	return append(errs, validateLoginUser(n.Spec.LoginUser, spec.Child("loginUser"), false)...)
}

func validateNodeOwner(n *nodusv1.Node) field.ErrorList {
	if len(n.Spec.Owner) > maxNodeOwnerBytes {
		// Ironic's column; a client reading it through /v1 expects no more.
		return field.ErrorList{field.TooLong(field.NewPath("spec", "owner"), "", maxNodeOwnerBytes)}
	}
	return nil
}

// maxNodeOwnerBytes is Ironic's bound on a node's owner.
const maxNodeOwnerBytes = 255

// ValidateNodeStatusUpdate checks a status written over old: on top of
// ValidateNodeStatus, the agent generation never goes back, since every
// generation below the current one names a retired agent credential
// (a status applied from an old manifest would make it valid again).
func ValidateNodeStatusUpdate(n, old *nodusv1.Node) field.ErrorList {
	errs := ValidateNodeStatus(n)
	if old != nil && n.Status.AgentGeneration < old.Status.AgentGeneration {
		errs = append(errs, field.Invalid(field.NewPath("status", "agentGeneration"), n.Status.AgentGeneration,
			fmt.Sprintf("must not decrease (was %d): a lower generation names a retired agent credential", old.Status.AgentGeneration)))
	}
	return errs
}

// ValidateNodeStatus checks what an agent or controller reports.
func ValidateNodeStatus(n *nodusv1.Node) field.ErrorList {
	status := field.NewPath("status")
	errs := validateInventory(&n.Status.Inventory, status.Child("inventory"))
	errs = append(errs, validateSSHEndpoint(n.Status.SSHAddress, n.Status.SSHHostKey, status)...)
	errs = append(errs, metav1validation.ValidateConditions(n.Status.Conditions, status.Child("conditions"))...)
	switch n.Status.ProvisionState {
	case "", nodusv1.ProvisionStateEnroll, nodusv1.ProvisionStateAvailable, nodusv1.ProvisionStateActive, nodusv1.ProvisionStateCleaning:
	default:
		errs = append(errs, field.NotSupported(status.Child("provisionState"), n.Status.ProvisionState,
			[]string{string(nodusv1.ProvisionStateEnroll), string(nodusv1.ProvisionStateAvailable), string(nodusv1.ProvisionStateActive),
				string(nodusv1.ProvisionStateCleaning)}))
	}
	if n.Status.Reservation != "" {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(n.Status.Reservation, false) {
			errs = append(errs, field.Invalid(status.Child("reservation"), n.Status.Reservation, msg))
		}
	}
	if n.Status.AllocationUID != "" && n.Status.Allocation == "" {
		errs = append(errs, field.Invalid(status.Child("allocationUID"), n.Status.AllocationUID, "may only be set with status.allocation"))
	}
	if n.Status.ReservationUID != "" && n.Status.Reservation == "" {
		errs = append(errs, field.Invalid(status.Child("reservationUID"), n.Status.ReservationUID, "may only be set with status.reservation"))
	}
	if c := n.Status.Cleaning; c != nil {
		errs = append(errs, validateCleaning(c, status.Child("cleaning"))...)
	}
	if n.Status.AgentGeneration < 0 {
		errs = append(errs, field.Invalid(status.Child("agentGeneration"), n.Status.AgentGeneration, "must not be negative"))
	}
	if n.Status.ExecutionSlots < 0 || n.Status.ExecutionSlots > 64 {
		errs = append(errs, field.Invalid(status.Child("executionSlots"), n.Status.ExecutionSlots, "must be between 0 and 64"))
	}
	if n.Status.AppliedEpoch < 0 {
		errs = append(errs, field.Invalid(status.Child("appliedEpoch"), n.Status.AppliedEpoch, "must not be negative"))
	}
	return errs
}

// Bounds of what an agent reports of a cleaning (the agent keeps within them).
const (
	// MaxCleaningOutput bounds the tail of a cleaning command's output kept on the Node.
	MaxCleaningOutput = 4 << 10
	// MaxCleaningSteps bounds the steps reported.
	MaxCleaningSteps = 32
	// MaxCleaningText bounds each step and the message.
	MaxCleaningText = maxFreeTextBytes
)

func validateCleaning(c *nodusv1.NodeCleaning, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Request < 1 {
		errs = append(errs, field.Invalid(path.Child("request"), c.Request, "must be at least 1"))
	}
	if c.Epoch < 0 {
		errs = append(errs, field.Invalid(path.Child("epoch"), c.Epoch, "must not be negative"))
	}
	switch c.Phase {
	case nodusv1.CleaningPending, nodusv1.CleaningSucceeded, nodusv1.CleaningFailed:
	default:
		errs = append(errs, field.NotSupported(path.Child("phase"), c.Phase,
			[]string{string(nodusv1.CleaningPending), string(nodusv1.CleaningSucceeded), string(nodusv1.CleaningFailed)}))
	}
	for i, u := range c.Users {
		errs = append(errs, validateLoginUser(u, path.Child("users").Index(i), true)...)
	}
	errs = append(errs, ValidateCleaningReport(c.Steps, c.Message, c.CommandOutput, path)...)
	return errs
}

// ValidateCleaningReport bounds what an agent reports of a cleaning.
func ValidateCleaningReport(steps []string, message, output string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(steps) > MaxCleaningSteps {
		errs = append(errs, field.TooMany(path.Child("steps"), len(steps), MaxCleaningSteps))
	}
	for i, step := range steps {
		errs = append(errs, validateReportedMessage(step, maxFreeTextBytes, path.Child("steps").Index(i))...)
	}
	errs = append(errs, validateReportedMessage(message, maxFreeTextBytes, path.Child("message"))...)
	errs = append(errs, validateReportedMessage(output, MaxCleaningOutput, path.Child("commandOutput"))...)
	return errs
}

// validateReportedMessage bounds a text an agent reports that others read
// in a terminal: at most max bytes of UTF-8, and no control character but
// newline and tab (an escape sequence in another tenant's or the
// operator's terminal could rewrite what it shows).
func validateReportedMessage(s string, max int, path *field.Path) field.ErrorList {
	if len(s) > max {
		return field.ErrorList{field.TooLong(path, "", max)}
	}
	if !utf8.ValidString(s) {
		return field.ErrorList{field.Invalid(path, "", "must be UTF-8")}
	}
	for _, r := range s {
		if terminalsafe.IsControl(r) {
			return field.ErrorList{field.Invalid(path, "", fmt.Sprintf("must hold no control character but newline and tab (found %U)", r))}
		}
	}
	return nil
}

// WithoutTerminalControls is s as an agent may report it: invalid UTF-8
// and control characters (terminalsafe.IsControl) replaced by U+FFFD.
func WithoutTerminalControls(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if terminalsafe.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, s)
}

// ValidateReservation checks a Reservation contract.
func ValidateReservation(r *nodusv1.Reservation) field.ErrorList {
	errs := validateClusterMeta(&r.ObjectMeta)
	spec := field.NewPath("spec")
	if r.Spec.Project == "" {
		errs = append(errs, field.Required(spec.Child("project"), "the customer project the server is reserved to"))
	} else {
		for _, msg := range apimachineryvalidation.ValidateNamespaceName(r.Spec.Project, false) {
			errs = append(errs, field.Invalid(spec.Child("project"), r.Spec.Project, msg))
		}
	}
	errs = append(errs, validatePlacement(&r.Spec.Placement, spec.Child("placement"))...)
	errs = append(errs, validateTerm(r.Spec.StartsAt.Time.IsZero(), r.Spec.EndsAt.Time.IsZero(), r.Spec.EndsAt.After(r.Spec.StartsAt.Time), spec)...)
	errs = append(errs, validateLoginUser(r.Spec.LoginUser, spec.Child("loginUser"), false)...)
	return errs
}

// MaxReservationNameLength is the longest reservation name: a label value's
// (the ReservedHost's and the class allocation's nodus.dev/reservation label
// name it), not a DNS subdomain's 253.
const MaxReservationNameLength = utilvalidation.LabelValueMaxLength

// ValidateNewReservation checks a reservation being created: its own
// fields, and a name that its host's labels can carry. Stored ones are not
// refused their updates for a name they were once given.
func ValidateNewReservation(r *nodusv1.Reservation) field.ErrorList {
	errs := ValidateReservation(r)
	if len(r.Name) > MaxReservationNameLength {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), r.Name, MaxReservationNameLength))
	}
	return errs
}

// ValidateReservationUpdate keeps the contract's parties fixed. The term may
// be extended or changed by the operator, never the project or the placement,
// and not once the capacity was released: the release ended the contract,
// and its ReservedHost keeps the term it was released in (a changed term
// there is refused, and the controller's every write of the host with it).
func ValidateReservationUpdate(r, old *nodusv1.Reservation) field.ErrorList {
	errs := ValidateReservation(r)
	spec := field.NewPath("spec")
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(r.Spec.Project, old.Spec.Project, spec.Child("project"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(r.Spec.Placement, old.Spec.Placement, spec.Child("placement"))...)
	startsAt, endsAt := spec.Child("startsAt"), spec.Child("endsAt")
	moved := func(path *field.Path, now, was metav1.Time, why string) {
		if !now.Equal(&was) {
			errs = append(errs, field.Forbidden(path, why))
		}
	}
	// What the controller has acted on stays: it never takes access back
	// for a start moved later, nor gives it again for an end moved later
	// once it is ending, and a change it would ignore is refused instead.
	switch state := old.Status.State; {
	case old.Status.Release != nil:
		moved(startsAt, r.Spec.StartsAt, old.Spec.StartsAt, "the capacity was released: its term no longer changes")
		moved(endsAt, r.Spec.EndsAt, old.Spec.EndsAt, "the capacity was released: its term no longer changes")
	case state == nodusv1.ReservationStateActive:
		moved(startsAt, r.Spec.StartsAt, old.Spec.StartsAt, "the term started and access was given: its start no longer changes (an earlier endsAt ends it sooner)")
	case state != "" && state != nodusv1.ReservationStatePending:
		why := fmt.Sprintf("the reservation is %s: its term no longer changes", state)
		moved(startsAt, r.Spec.StartsAt, old.Spec.StartsAt, why)
		moved(endsAt, r.Spec.EndsAt, old.Spec.EndsAt, why)
	}
	return errs
}

// ValidateReservationStatus checks the controller's view of a reservation.
func ValidateReservationStatus(r, old *nodusv1.Reservation) field.ErrorList {
	status := field.NewPath("status")
	errs := validateReservationState(r.Status.State, status.Child("state"))
	if old != nil && r.Status.Epoch < old.Status.Epoch {
		errs = append(errs, field.Invalid(status.Child("epoch"), r.Status.Epoch, fmt.Sprintf("must not decrease (was %d): epochs are never reused", old.Status.Epoch)))
	}
	if r.Status.Epoch < 0 {
		errs = append(errs, field.Invalid(status.Child("epoch"), r.Status.Epoch, "must not be negative"))
	}
	if old != nil {
		errs = append(errs, stateMovesForward(r.Status.State, old.Status.State, status.Child("state"))...)
		errs = append(errs, releaseStays(r.Status.Release, old.Status.Release, status.Child("release"))...)
	}
	errs = append(errs, metav1validation.ValidateConditions(r.Status.Conditions, status.Child("conditions"))...)
	return errs
}

// stateStep orders a reservation's states; a state moves only to a later
// step, and from releasing only to released, from ending only to ended.
var stateStep = map[nodusv1.ReservationState]int{
	"": 0, nodusv1.ReservationStatePending: 0, nodusv1.ReservationStateActive: 1,
	nodusv1.ReservationStateReleasing: 2, nodusv1.ReservationStateEnding: 2,
	nodusv1.ReservationStateReleased: 3, nodusv1.ReservationStateEnded: 3,
}

// released says whether state belongs to a release, not to a term's end.
func released(state nodusv1.ReservationState) bool {
	return state == nodusv1.ReservationStateReleasing || state == nodusv1.ReservationStateReleased
}

// stateMovesForward refuses a status write that moves a reservation's state
// back (a released one active again: its node claimed again, certificates
// issued again) or from a release to a term's end or back. Only the
// lifecycle moves it, and only forward.
func stateMovesForward(state, was nodusv1.ReservationState, path *field.Path) field.ErrorList {
	if state == was {
		return nil
	}
	to, known := stateStep[state]
	from := stateStep[was]
	crossed := from >= 2 && released(state) != released(was)
	if !known || to >= from && !crossed {
		return nil // an unknown state is refused by its own check
	}
	return field.ErrorList{field.Forbidden(path, fmt.Sprintf("a reservation that is %s never becomes %s: a release is irreversible and an ended term does not begin again", was, state))}
}

// releaseStays refuses a status write that removes a recorded release or
// moves its time.
func releaseStays(rel, was *nodusv1.ReservedHostReleaseStatus, path *field.Path) field.ErrorList {
	switch {
	case was == nil:
		return nil
	case rel == nil:
		return field.ErrorList{field.Forbidden(path, "a release is irreversible: it stays recorded")}
	case !rel.RequestedAt.Equal(&was.RequestedAt):
		return field.ErrorList{field.Forbidden(path.Child("requestedAt"), "a release's time never changes")}
	}
	return nil
}

// ValidateReservedHost checks a ReservedHost projection.
func ValidateReservedHost(h *nodusv1.ReservedHost) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&h.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, ValidateReservedHostStatus(h, nil)...)
}

// ValidateReservedHostStatus checks a ReservedHost's status.
func ValidateReservedHostStatus(h, old *nodusv1.ReservedHost) field.ErrorList {
	status := field.NewPath("status")
	errs := metav1validation.ValidateConditions(h.Status.Conditions, status.Child("conditions"))
	errs = append(errs, validateInventory(&h.Status.Inventory, status.Child("inventory"))...)
	res := status.Child("reservation")
	r := h.Status.Reservation
	if r.Project != h.Namespace {
		errs = append(errs, field.Invalid(res.Child("project"), r.Project, fmt.Sprintf("must equal the namespace %q", h.Namespace)))
	}
	errs = append(errs, validateTerm(r.StartsAt.Time.IsZero(), r.EndsAt.Time.IsZero(), r.EndsAt.After(r.StartsAt.Time), res)...)
	errs = append(errs, validateLoginUser(r.LoginUser, res.Child("loginUser"), true)...)
	if r.State == "" {
		errs = append(errs, field.Required(res.Child("state"), ""))
	} else {
		errs = append(errs, validateReservationState(r.State, res.Child("state"))...)
	}
	if r.Epoch < 0 {
		errs = append(errs, field.Invalid(res.Child("epoch"), r.Epoch, "must not be negative"))
	}
	if old != nil && r.Epoch < old.Status.Reservation.Epoch {
		errs = append(errs, field.Invalid(res.Child("epoch"), r.Epoch, fmt.Sprintf("must not decrease (was %d): epochs are never reused", old.Status.Reservation.Epoch)))
	}
	if old != nil {
		errs = append(errs, stateMovesForward(r.State, old.Status.Reservation.State, res.Child("state"))...)
		errs = append(errs, releaseStays(h.Status.Release, old.Status.Release, status.Child("release"))...)
	}
	if old != nil && !old.Status.Reservation.EndsAt.IsZero() && !r.EndsAt.Equal(&old.Status.Reservation.EndsAt) &&
		(old.Status.Release != nil) {
		errs = append(errs, field.Forbidden(res.Child("endsAt"), "a release never changes the end of the term"))
	}
	if c := h.Status.Connect; c != nil {
		cp := status.Child("connect")
		for name, v := range map[string]string{"command": c.Command, "host": c.Host, "hostKey": c.HostKey} {
			if v == "" {
				errs = append(errs, field.Required(cp.Child(name), ""))
			}
		}
		errs = append(errs, validateLoginUser(c.LoginUser, cp.Child("loginUser"), true)...)
	}
	if rel := h.Status.Release; rel != nil {
		rp := status.Child("release")
		if rel.RequestedAt.IsZero() {
			errs = append(errs, field.Required(rp.Child("requestedAt"), ""))
		}
		if rel.DrainedAt != nil && rel.DrainedAt.Before(&rel.RequestedAt) {
			errs = append(errs, field.Invalid(rp.Child("drainedAt"), rel.DrainedAt, "must not be before requestedAt"))
		}
	}
	return errs
}

// IsClusterObjectName says whether name (a generateName prefix, with
// prefix) is one validateClusterMeta accepts: a store reads and writes an
// object of such a name, and refuses another before it looks.
func IsClusterObjectName(name string, prefix bool) bool {
	return len(apimachineryvalidation.NameIsDNSSubdomain(name, prefix)) == 0
}

func validateClusterMeta(meta *metav1.ObjectMeta) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMeta(meta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

func validatePlacement(p *nodusv1.ReservationPlacement, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := 0
	for _, v := range []string{p.Allocation, p.Node, p.ResourceClass} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		errs = append(errs, field.Invalid(path, "", "set exactly one of allocation, node or resourceClass"))
	}
	errs = append(errs, validateReferenceName(p.Allocation, path.Child("allocation"), false)...)
	errs = append(errs, validateReferenceName(p.Node, path.Child("node"), false)...)
	errs = append(errs, validateResourceClass(p.ResourceClass, path.Child("resourceClass"), false)...)
	errs = append(errs, validateTraits(p.Traits, path.Child("traits"))...)
	if len(p.Traits) > 0 && p.ResourceClass == "" {
		errs = append(errs, field.Forbidden(path.Child("traits"), "traits only apply together with resourceClass"))
	}
	return errs
}

func validateTerm(startZero, endZero, endAfterStart bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if startZero {
		errs = append(errs, field.Required(path.Child("startsAt"), "the beginning of the term"))
	}
	if endZero {
		errs = append(errs, field.Required(path.Child("endsAt"), "the exclusive end of the term"))
	}
	if !startZero && !endZero && !endAfterStart {
		errs = append(errs, field.Invalid(path.Child("endsAt"), "", "must be after startsAt"))
	}
	return errs
}

func validateReservationState(s nodusv1.ReservationState, path *field.Path) field.ErrorList {
	switch s {
	case "", nodusv1.ReservationStatePending, nodusv1.ReservationStateActive, nodusv1.ReservationStateReleasing,
		nodusv1.ReservationStateReleased, nodusv1.ReservationStateEnding, nodusv1.ReservationStateEnded:
		return nil
	}
	return field.ErrorList{field.NotSupported(path, s, []string{
		string(nodusv1.ReservationStatePending), string(nodusv1.ReservationStateActive), string(nodusv1.ReservationStateReleasing),
		string(nodusv1.ReservationStateReleased), string(nodusv1.ReservationStateEnding), string(nodusv1.ReservationStateEnded)})}
}

// Inventory bounds: beyond what any one server has today by an order of
// magnitude, so that a real report always fits and a forged one cannot
// pass for a plausible machine of absurd size.
const (
	maxInventoryCPUs      = 16384
	maxInventoryMemoryMiB = 64 << 20 // 64 TiB
	maxInventoryDiskGiB   = 1 << 20  // 1 PiB
	maxInventoryGPUs      = 64
	maxGPUMemoryMiB       = 1 << 20 // 1 TiB
	maxInventoryText      = 128
)

// gpuTypePattern is an accelerator model as the agent derives it, "h100-sxm-80g".
var gpuTypePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func validateInventory(inv *nodusv1.NodeInventory, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, b := range []struct {
		name     string
		v, limit int64
	}{{"cpu", int64(inv.CPU), maxInventoryCPUs}, {"memoryMiB", inv.MemoryMiB, maxInventoryMemoryMiB}, {"diskGiB", inv.DiskGiB, maxInventoryDiskGiB}} {
		if b.v < 0 || b.v > b.limit {
			errs = append(errs, field.Invalid(path.Child(b.name), b.v, fmt.Sprintf("must be between 0 and %d", b.limit)))
		}
	}
	if len(inv.GPUs) > maxInventoryGPUs {
		errs = append(errs, field.TooMany(path.Child("gpus"), len(inv.GPUs), maxInventoryGPUs))
	}
	for i, g := range inv.GPUs {
		gp := path.Child("gpus").Index(i)
		if g.Type == "" {
			errs = append(errs, field.Required(gp.Child("type"), `the accelerator model, e.g. "h100-sxm-80g"`))
		} else if !gpuTypePattern.MatchString(g.Type) {
			errs = append(errs, field.Invalid(gp.Child("type"), g.Type, "letters, digits, '.', '_' and '-', at most 63 characters"))
		}
		if g.MemoryMiB < 0 || g.MemoryMiB > maxGPUMemoryMiB {
			errs = append(errs, field.Invalid(gp.Child("memoryMiB"), g.MemoryMiB, fmt.Sprintf("must be between 0 and %d", maxGPUMemoryMiB)))
		}
		errs = append(errs, validateReportedText(g.Driver, gp.Child("driver"))...)
	}
	errs = append(errs, validateReportedText(inv.NodusdVersion, path.Child("nodusdVersion"))...)
	errs = append(errs, validateReportedText(inv.OS, path.Child("os"))...)
	return errs
}

// validateReportedText bounds a one-line text an agent reports: printable,
// no control characters, at most maxInventoryText bytes.
func validateReportedText(s string, path *field.Path) field.ErrorList {
	if len(s) > maxInventoryText {
		return field.ErrorList{field.TooLong(path, "", maxInventoryText)}
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || !utf8.ValidRune(r) || r == utf8.RuneError {
			return field.ErrorList{field.Invalid(path, s, "must be one line of printable characters")}
		}
	}
	return nil
}

// validateSSHEndpoint checks what a customer's laptop writes into its SSH
// configuration: the address is host:port with a DNS name or an IP, the
// host key exactly one public key of an accepted type in canonical form.
func validateSSHEndpoint(address, hostKey string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if address != "" {
		if _, _, err := sshvalue.ParseAddress(address); err != nil {
			errs = append(errs, field.Invalid(path.Child("sshAddress"), address, "must be HOST:PORT with a DNS name or an IP address: "+err.Error()))
		}
	}
	if hostKey != "" {
		if err := sshvalue.CheckCanonicalHostKey(hostKey); err != nil {
			shown := hostKey
			if len(shown) > 256 {
				shown = shown[:256] + "…"
			}
			errs = append(errs, field.Invalid(path.Child("sshHostKey"), shown, "must be one SSH public key (ed25519, ECDSA or RSA of 2048+ bits) as TYPE BASE64: "+err.Error()))
		}
	}
	return errs
}

func validateReferenceName(name string, path *field.Path, required bool) field.ErrorList {
	if name == "" {
		if required {
			return field.ErrorList{field.Required(path, "")}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

func validateResourceClass(rc string, path *field.Path, required bool) field.ErrorList {
	if rc == "" {
		if required {
			return field.ErrorList{field.Required(path, `a resource class such as "gpu-h100x8"`)}
		}
		return nil
	}
	if !resourceClassPattern.MatchString(rc) {
		return field.ErrorList{field.Invalid(path, rc, "must be 1-80 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")}
	}
	return nil
}

func validateTraits(traits []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(traits) > maxTraits {
		errs = append(errs, field.TooMany(path, len(traits), maxTraits))
	}
	seen := sets.New[string]()
	for i, t := range traits {
		if !traitPattern.MatchString(t) {
			errs = append(errs, field.Invalid(path.Index(i), t, `must be an upper-case trait such as "CUSTOM_NVLINK" (A-Z, 0-9, '_')`))
		}
		if seen.Has(t) {
			errs = append(errs, field.Duplicate(path.Index(i), t))
		}
		seen.Insert(t)
	}
	return errs
}

// CheckLoginUser says why user cannot be a login user, or nil: what the
// API refuses, for an agent to check again where the name lands.
func CheckLoginUser(user string) error {
	if errs := validateLoginUser(user, field.NewPath("loginUser"), true); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

func validateLoginUser(user string, path *field.Path, required bool) field.ErrorList {
	if user == "" {
		if required {
			return field.ErrorList{field.Required(path, "the operating-system account")}
		}
		return nil
	}
	if user == "root" {
		return field.ErrorList{field.Forbidden(path, "customers never log in as root")}
	}
	if !loginUserPattern.MatchString(user) {
		return field.ErrorList{field.Invalid(path, user, "must be a POSIX user name: lower-case letters, digits, '_' or '-', starting with a letter or '_', at most 32 characters")}
	}
	return nil
}

func validateFreeText(s string, path *field.Path) field.ErrorList {
	if len(s) > maxFreeTextBytes {
		return field.ErrorList{field.TooLong(path, "", maxFreeTextBytes)}
	}
	return nil
}

// MaxHeartbeatReservations bounds the reservations one heartbeat reports:
// an agent reports those on its node not yet released or ended (a node
// holds one at a time, two across a handover); the server reads each from
// its watch cache, and at most a few from etcd.
const MaxHeartbeatReservations = 256

// ValidateHeartbeatReservations checks a heartbeat's evidence before any
// of it counts: each entry names a reservation once, with no negative
// epoch or count.
func ValidateHeartbeatReservations(rs []nodusv1.ReservationEvidence, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(rs) > MaxHeartbeatReservations {
		return field.ErrorList{field.TooMany(path, len(rs), MaxHeartbeatReservations)}
	}
	seen := sets.New[string]()
	for i, r := range rs {
		p := path.Index(i)
		switch msgs := utilvalidation.IsDNS1123Subdomain(r.Name); {
		case r.Name == "":
			errs = append(errs, field.Required(p.Child("name"), "the reservation"))
		case len(msgs) > 0:
			errs = append(errs, field.Invalid(p.Child("name"), r.Name, strings.Join(msgs, "; ")))
		case seen.Has(r.Name):
			errs = append(errs, field.Duplicate(p.Child("name"), r.Name))
		}
		seen.Insert(r.Name)
		for _, n := range []struct {
			name  string
			value int64
		}{{"appliedEpoch", r.AppliedEpoch}, {"ownerSessions", int64(r.OwnerSessions)}, {"borrowerExecutions", int64(r.BorrowerExecutions)}, {"refusedEpoch", r.RefusedEpoch}} {
			if n.value < 0 {
				errs = append(errs, field.Invalid(p.Child(n.name), n.value, "must not be negative"))
			}
		}
		// A refusal is shown to the reservation's tenant: one line, bounded.
		switch {
		case r.RefusedEpoch > 0 && r.Refusal == "":
			errs = append(errs, field.Required(p.Child("refusal"), "why the agent refuses refusedEpoch"))
		case r.RefusedEpoch == 0 && r.Refusal != "":
			errs = append(errs, field.Invalid(p.Child("refusal"), "", "only with refusedEpoch"))
		case r.RefusedEpoch > 0 && !sshvalue.CanonicalUID(r.RefusedUID):
			errs = append(errs, field.Invalid(p.Child("refusedUID"), r.RefusedUID, "the UID of the reservation refused, with refusedEpoch"))
		case r.RefusedEpoch == 0 && r.RefusedUID != "":
			errs = append(errs, field.Invalid(p.Child("refusedUID"), r.RefusedUID, "only with refusedEpoch"))
		case r.RefusedEpoch > 0 && r.RefusedEpoch <= r.AppliedEpoch:
			errs = append(errs, field.Invalid(p.Child("refusedEpoch"), r.RefusedEpoch, "must be above appliedEpoch: an agent refuses an access it has not applied"))
		case strings.ContainsAny(r.Refusal, "\n\t") || strings.ContainsFunc(r.Refusal, NotInALine):
			errs = append(errs, field.Invalid(p.Child("refusal"), "", "must be one line, without line separators or format characters (bidirectional overrides)"))
		default:
			errs = append(errs, validateReportedMessage(r.Refusal, MaxRefusalText, p.Child("refusal"))...)
		}
	}
	return errs
}

// MaxRefusalText bounds an agent's refusal of a reservation's access.
const MaxRefusalText = 256

// NotInALine says whether r has no place in one line of text shown to
// someone else: a line or paragraph separator (U+2028, U+2029), or a
// format character such as a bidirectional override (U+202E), which
// reorders what a terminal shows after it.
func NotInALine(r rune) bool {
	return unicode.In(r, unicode.Zl, unicode.Zp, unicode.Cf)
}

// MaxReportText bounds an execution report's message.
const MaxReportText = maxFreeTextBytes

// reportReason is how agents name why an execution ended: one CamelCase
// word, as a condition's reason.
var reportReason = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,63}$`)

// ServerExecutionReasons are the reasons of what the server decides about
// an execution (its waiting and placement; its end when no agent can say,
// or its agent would not): an agent reporting one would tell the borrower
// the server ended it.
var ServerExecutionReasons = sets.New("Waiting", "Scheduled", "HostLost", "HostUnreachable", "NotEndedByHost")

// ValidateExecutionReport checks an agent's report before anything of it
// is written: its message and reason land in the Execution's status.
func ValidateExecutionReport(r *nodusv1.ExecutionReport) field.ErrorList {
	var errs field.ErrorList
	switch {
	case r.Reason != "" && !reportReason.MatchString(r.Reason):
		errs = append(errs, field.Invalid(field.NewPath("reason"), r.Reason, "must be one CamelCase word of at most 64 letters and digits"))
	case ServerExecutionReasons.Has(r.Reason):
		errs = append(errs, field.Invalid(field.NewPath("reason"), r.Reason, "is a reason the server gives, not an agent"))
	}
	errs = append(errs, validateReportedMessage(r.Message, MaxReportText, field.NewPath("message"))...)
	switch {
	case r.LogDroppedBytes < 0:
		errs = append(errs, field.Invalid(field.NewPath("logDroppedBytes"), r.LogDroppedBytes, "must not be negative"))
	case r.LogDroppedBytes > MaxLogDroppedBytes:
		// The server adds what it cuts itself to it: the sum must not wrap.
		errs = append(errs, field.Invalid(field.NewPath("logDroppedBytes"), r.LogDroppedBytes, fmt.Sprintf("must be at most %d (an exbibyte)", int64(MaxLogDroppedBytes))))
	}
	return errs
}
