package v1

import "fmt"

// GPUSummary renders GPUs as "8× h100-sxm-80g" (mixed models are joined with ", ").
func GPUSummary(gpus []NodeGPU) string {
	if len(gpus) == 0 {
		return "-"
	}
	var order []string
	counts := map[string]int{}
	for _, g := range gpus {
		if counts[g.Type] == 0 {
			order = append(order, g.Type)
		}
		counts[g.Type]++
	}
	out := ""
	for i, t := range order {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%d× %s", counts[t], t)
	}
	return out
}

// ClaimedByAllocation says whether the node's allocation claim is a's: its
// name, and its UID when the claim carries one (claims written before they
// did count by name). An allocation made again under the name is another.
func (s *NodeStatus) ClaimedByAllocation(a *Allocation) bool {
	return s.Allocation == a.Name && (s.AllocationUID == "" || s.AllocationUID == a.UID)
}
