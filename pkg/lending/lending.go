// Package lending holds the rules of lending that the server's actions, the
// scheduler and the authorizer share: when a host counts as lent, what it
// lends, and the alias borrowers know it by.
package lending

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// drainAsked ends the message of a running execution the server asked to
// drain (status.drainRequestedAt): what precedes it is why, and the host's
// agent reports that as the drained execution's message.
const drainAsked = "; the host stops it"

// DrainAsked is the message of a running execution asked to drain, why.
func DrainAsked(why string) string { return why + drainAsked }

// WhyDrained is why a running execution was asked to drain, from its
// message: what DrainAsked wrote, or, for a message it did not write (a
// server before session 61 wrote none), the only drain such a server
// asked for, a withdrawal.
func WhyDrained(message string) string {
	if why, ok := strings.CutSuffix(message, drainAsked); ok && why != "" {
		return why
	}
	return "the owner withdrew the host"
}

// MaxExecutionsPerHost bounds what an owner may allow at once on one host.
const MaxExecutionsPerHost = 64

// HostAlias is the name borrowers see for the host of a node: derived from
// the node's UID, so it says nothing of the node's name or its owner, and a
// node enrolled anew is a new host to borrowers.
func HostAlias(node *nodusv1.Node) string {
	sum := sha256.Sum256([]byte("nodus-host-alias/" + string(node.UID)))
	return "host-" + hex.EncodeToString(sum[:6])
}

// Lent says whether borrowers may use the reserved host now: the owner lends
// it and the reservation is active. Releasing and the end of the term
// therefore drain lending without touching the agreement itself.
func Lent(r *nodusv1.Reservation) bool {
	return r.Status.State == nodusv1.ReservationStateActive && r.Status.Lending != nil && r.Status.Lending.Lent
}

// LentAt says whether borrowers may be given the host at now: lent, with
// its term not over and its reservation not deleted. Until the reservation
// controller moves such a reservation on (behind on its work, or between
// two leaders), Lent still says yes; a placement or a start in that time
// would begin what the term's end drains at once.
func LentAt(r *nodusv1.Reservation, now time.Time) bool {
	return Lent(r) && now.Before(r.Spec.EndsAt.Time) && r.DeletionTimestamp == nil
}

// State is the owner-visible lending state of r.
func State(r *nodusv1.Reservation) nodusv1.HostLendingState {
	switch {
	case Lent(r):
		return nodusv1.HostLendingLent
	case r.Status.State == nodusv1.ReservationStateActive:
		return nodusv1.HostLendingWithdrawn
	}
	return nodusv1.HostLendingEnded
}

// BorrowerCap is the most GPUs project may borrow at once in pool, and
// whether the pool lends to it at all.
func BorrowerCap(pool *nodusv1.Pool, project string) (int32, bool) {
	b, ok := Borrower(pool, project)
	return b.MaxGPUs, ok
}

// Borrower is project's entry among pool's borrowers, with its caps, and
// whether the pool lends to it now.
func Borrower(pool *nodusv1.Pool, project string) (nodusv1.PoolBorrower, bool) {
	if pool == nil || pool.Spec.Lending == nil || !pool.Spec.Lending.Open {
		return nodusv1.PoolBorrower{}, false
	}
	for _, b := range pool.Spec.Lending.Borrowers {
		if b.Project == project {
			return b, true
		}
	}
	return nodusv1.PoolBorrower{}, false
}

// GPUCount is the number of GPUs a node reports.
func GPUCount(node *nodusv1.Node) int32 {
	if node == nil {
		return 0
	}
	return int32(len(node.Status.Inventory.GPUs))
}

// The least an owner may lend, so that an execution can start at all.
const (
	MinExecutionMemoryMiB = 64
	MinExecutionMilliCPUs = 100
)

// DefaultShare is what of a host's total (memory, CPU time) is lent by
// default: the share of the GPUs lent, counting at least one, of the
// host's GPUs (all of a host without GPUs).
func DefaultShare(total int64, lentGPUs, hostGPUs int32) int64 {
	if hostGPUs <= 0 {
		return total
	}
	return total * int64(max(lentGPUs, 1)) / int64(hostGPUs)
}

// WithHostShare is l with the memory and CPUs it leaves uncapped (a lend
// made before every lend had to cap them, from a host that had not reported
// its inventory) capped at the default share of the host inv describes, as
// a lend would cap them now. l itself is not changed. A cap stays 0 where
// inv does not know the host's figure: the caller must then refuse to run
// anything, as 0 is no limit to the sandbox.
func WithHostShare(l *nodusv1.ReservationLending, inv *nodusv1.NodeInventory) *nodusv1.ReservationLending {
	if l == nil || (l.MemoryMiB > 0 && l.MilliCPUs > 0) || inv == nil {
		return l
	}
	out := *l
	hostGPUs := int32(len(inv.GPUs))
	if out.MemoryMiB <= 0 {
		out.MemoryMiB = hostShare(inv.MemoryMiB, out.MaxGPUs, hostGPUs)
	}
	if out.MilliCPUs <= 0 {
		out.MilliCPUs = hostShare(int64(inv.CPU)*1000, out.MaxGPUs, hostGPUs)
	}
	return &out
}

// HeldToHost is l with its memory and CPUs no more than the machine inv
// describes has: a reservation moved to another node keeps its agreement,
// which was checked against the first machine only. The scheduler places
// by it; the host's agent keeps to the agreement as lent, which its
// placements then never pass. l itself is not changed; a figure inv does
// not know holds nothing back.
func HeldToHost(l *nodusv1.ReservationLending, inv *nodusv1.NodeInventory) *nodusv1.ReservationLending {
	if l == nil || inv == nil {
		return l
	}
	out := *l
	if inv.MemoryMiB > 0 && out.MemoryMiB > inv.MemoryMiB {
		out.MemoryMiB = inv.MemoryMiB
	}
	if milli := int64(inv.CPU) * 1000; milli > 0 && out.MilliCPUs > milli {
		out.MilliCPUs = milli
	}
	return &out
}

// hostShare is DefaultShare never above the host's total (an agreement that
// lends more GPUs than the host reports now) nor below 0.
func hostShare(total int64, lentGPUs, hostGPUs int32) int64 {
	return max(min(DefaultShare(total, lentGPUs, hostGPUs), total), 0)
}

// ExecutionLimits is an execution's share of what l lends: by its GPUs of
// the GPUs lent, or, for an execution without GPUs (or where none are
// lent), one execution's share of MaxExecutions. 0 where l lends no limit.
func ExecutionLimits(l *nodusv1.ReservationLending, gpus int32) (memoryMiB, milliCPUs int64) {
	if l == nil {
		return 0, 0
	}
	share := func(total int64) int64 {
		if total <= 0 {
			return 0
		}
		// Never 0 once there is a cap: to the sandbox 0 is no limit.
		if gpus > 0 && l.MaxGPUs > 0 {
			return max(total*int64(gpus)/int64(l.MaxGPUs), 1)
		}
		return max(total/int64(max(l.MaxExecutions, 1)), 1)
	}
	return share(l.MemoryMiB), share(l.MilliCPUs)
}

// Usage is how much of a lent host borrowers hold, per borrowing project.
type Usage map[string]nodusv1.HostBorrower

// Add counts an execution of project holding gpus.
func (u Usage) Add(project string, gpus int32) {
	b := u[project]
	b.Project = project
	b.GPUs += gpus
	b.Executions++
	u[project] = b
}

// Status is the HostLending status of reservation r whose host is in pool,
// given its current use and the GPU indices borrowers hold. Borrowers are
// named only where the pool says so.
func Status(r *nodusv1.Reservation, pool *nodusv1.Pool, usage Usage, gpus []int32) nodusv1.HostLendingStatus {
	st := nodusv1.HostLendingStatus{State: State(r), GPUIndices: gpus}
	if l := r.Status.Lending; l != nil {
		st.Epoch, st.MaxGPUs, st.MaxExecutions, st.ChangedAt = l.Epoch, l.MaxGPUs, l.MaxExecutions, l.ChangedAt
		st.MemoryMiB, st.MilliCPUs = l.MemoryMiB, l.MilliCPUs
	}
	if pool != nil {
		st.Pool = pool.Name
	}
	show := pool != nil && pool.Spec.Lending != nil && pool.Spec.Lending.ShowBorrowers
	for _, b := range usage {
		st.BorrowedGPUs += b.GPUs
		st.Executions += b.Executions
		if show {
			st.Borrowers = append(st.Borrowers, b)
		}
	}
	slices.SortFunc(st.Borrowers, func(a, b nodusv1.HostBorrower) int { return strings.Compare(a.Project, b.Project) })
	return st
}
