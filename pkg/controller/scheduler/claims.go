package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClaimsPrefix is where GPU placements are claimed: one key per host GPU,
// /nodus/gpu-claims/<host alias>/<index>, holding its execution.
const ClaimsPrefix = "/nodus/gpu-claims/"

// staleClaim is how long a claim may stand for an execution that is still
// pending: its placement's status write failed, or its scheduler died
// between the claim and the write.
const staleClaim = time.Minute

// gpuClaims make a GPU placement a claim etcd enforces, not a memory of
// the scheduler that made it: a key is created only where none is, so two
// schedulers (an old leader that has not noticed yet, and the new one)
// never give one GPU to two executions.
type gpuClaims struct {
	kv  clientv3.KV
	now func() time.Time
}

// claim is one claimed GPU.
type claim struct {
	host  string
	gpu   int32
	owner string // the execution: namespace/name/uid
	at    time.Time
	// revision is the key's mod revision, for a release that races no one.
	revision int64
}

func claimKey(host string, gpu int32) string {
	return ClaimsPrefix + host + "/" + strconv.Itoa(int(gpu))
}

// list reads every claim.
func (g *gpuClaims) list(ctx context.Context) ([]claim, error) {
	resp, err := g.kv.Get(ctx, ClaimsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]claim, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), ClaimsPrefix)
		slash := strings.LastIndexByte(rest, '/')
		gpu, err := strconv.Atoi(rest[slash+1:])
		if slash < 0 || err != nil {
			continue // not a key of ours
		}
		owner, made, _ := strings.Cut(string(kv.Value), "@")
		unix, _, _ := strings.Cut(made, "#")
		secs, _ := strconv.ParseInt(unix, 10, 64)
		out = append(out, claim{host: rest[:slash], gpu: int32(gpu), owner: owner, at: time.Unix(secs, 0), revision: kv.ModRevision})
	}
	return out, nil
}

// take claims gpus of host for owner, all or none. It reports false when
// another execution holds any of them. made is the claim this call wrote
// (owner@time#nonce), which only it may release; it is empty when the GPUs
// were the owner's already, claimed by another scheduler or an earlier
// pass, whose placement that claim backs.
func (g *gpuClaims) take(ctx context.Context, host string, gpus []int32, owner string) (taken bool, made string, err error) {
	if len(gpus) == 0 {
		return true, "", nil
	}
	var nonce [4]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return false, "", err
	}
	value := owner + "@" + strconv.FormatInt(g.now().Unix(), 10) + "#" + hex.EncodeToString(nonce[:])
	var cmps []clientv3.Cmp
	var puts []clientv3.Op
	for _, gpu := range gpus {
		k := claimKey(host, gpu)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		puts = append(puts, clientv3.OpPut(k, value))
	}
	resp, err := g.kv.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err == nil && resp.Succeeded {
		return true, value, nil
	}
	// A claim whose answer was lost may have landed (this call's, then), and
	// one refused may have been this owner's own, landed before: the GPUs
	// are the owner's when it holds every one of them.
	held, mine, readErr := g.heldBy(ctx, host, gpus, owner, value)
	switch {
	case held && mine:
		return true, value, nil
	case held:
		return true, "", nil
	case err != nil:
		return false, "", fmt.Errorf("claiming GPUs %v of %s: %w", gpus, host, err)
	case readErr != nil:
		return false, "", fmt.Errorf("reading the claims of GPUs %v of %s: %w", gpus, host, readErr)
	}
	return false, "", nil
}

// heldBy says whether owner claims every one of gpus of host, and whether
// every claim is value (one call's).
func (g *gpuClaims) heldBy(ctx context.Context, host string, gpus []int32, owner, value string) (held, mine bool, err error) {
	resp, err := g.kv.Get(ctx, ClaimsPrefix+host+"/", clientv3.WithPrefix())
	if err != nil {
		return false, false, err
	}
	owned := map[string]string{}
	for _, kv := range resp.Kvs {
		if strings.HasPrefix(string(kv.Value), owner+"@") {
			owned[string(kv.Key)] = string(kv.Value)
		}
	}
	mine = true
	for _, gpu := range gpus {
		v, ok := owned[claimKey(host, gpu)]
		if !ok {
			return false, false, nil
		}
		mine = mine && v == value
	}
	return true, mine, nil
}

// release removes c unless it changed since it was read.
func (g *gpuClaims) release(ctx context.Context, c claim) error {
	k := claimKey(c.host, c.gpu)
	_, err := g.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", c.revision)).Then(clientv3.OpDelete(k)).Commit()
	return err
}

// releaseOwned removes the claims of gpus of host that one take made
// (after its placement's status write was refused), leaving every other
// alone: another owner's, and the same owner's made by another scheduler,
// whose placement may be the one written. Nothing is released for an
// empty made.
func (g *gpuClaims) releaseOwned(ctx context.Context, host string, gpus []int32, made string) error {
	if made == "" {
		return nil
	}
	for _, gpu := range gpus {
		k := claimKey(host, gpu)
		resp, err := g.kv.Get(ctx, k)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == made {
			if err := g.release(ctx, claim{host: host, gpu: gpu, revision: resp.Kvs[0].ModRevision}); err != nil {
				return err
			}
		}
	}
	return nil
}
