package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	clientscheme "github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/scheme"
	nodusv1client "github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/typed/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/wire"
)

// crud compares GET, LIST and UPDATE through the API with raw etcd Get,
// Range and Put of the same bytes on the same etcd.
func crud(s *server, c config) error {
	ctx := context.Background()
	api := s.client.NodusV1()
	etcd := s.etcd

	if _, err := api.Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	names := make([]string, c.objects)
	// latest holds each host as last written, so that an UPDATE is one PUT
	// with the right resourceVersion, like etcd's Put.
	latest := make([]*nodusv1.ReservedHost, c.objects)
	var latestMu sync.Mutex
	fmt.Fprintf(os.Stderr, "creating %d ReservedHosts\n", c.objects)
	if err := parallel(c.objects, c.concurrency, func(i int) error {
		names[i] = fmt.Sprintf("host-%05d", i)
		h, err := api.ReservedHosts("bench").Create(ctx, host(names[i]), metav1.CreateOptions{})
		latestMu.Lock()
		latest[i] = h
		latestMu.Unlock()
		return err
	}); err != nil {
		return err
	}
	key := func(i int) string { return "/registry/nodus.dev/reservedhosts/bench/" + names[i%len(names)] }
	stored, err := etcd.Get(ctx, key(0))
	if err != nil || len(stored.Kvs) == 0 {
		return fmt.Errorf("read %s from etcd: %v", key(0), err)
	}
	value := string(stored.Kvs[0].Value)

	// Each operation runs through a JSON client (client-go's default, and
	// kubectl's) and a protobuf one (what Kubernetes' own controllers use),
	// then on raw etcd.
	pb, err := versioned.NewForConfig(wire.Protobuf(s.config))
	if err != nil {
		return err
	}
	clients := []struct {
		suffix string
		api    nodusv1client.NodusV1Interface
	}{{"", api}, {"protobuf", pb.NodusV1()}}
	var rows []row
	// extras are more ways to make the same request, each a row of its own.
	// Each phase starts once the server and etcd are quiet: the controllers'
	// answers to one phase's writes must not land in the next phase's
	// window (on two cores they would slow whichever side comes next).
	quietly := func(n, conc int, op func(i int) error) (result, error) {
		if err := s.quiesce(ctx); err != nil {
			return result{}, err
		}
		return timed(n, conc, op)
	}
	measure := func(op string, n, conc int, apiOp func(api nodusv1client.NodusV1Interface, i int) error, etcdOp func(i int) error, extras ...variant) error {
		var measured []row
		for _, client := range clients {
			a, err := quietly(n, conc, func(i int) error { return apiOp(client.api, i) })
			if err != nil {
				return fmt.Errorf("%s through the API (%s): %w", op, client.suffix, err)
			}
			measured = append(measured, row{op: withSuffix(op, client.suffix), api: a})
		}
		for _, extra := range extras {
			a, err := quietly(n, conc, extra.op)
			if err != nil {
				return fmt.Errorf("%s through the API (%s): %w", op, extra.suffix, err)
			}
			measured = append(measured, row{op: withSuffix(op, extra.suffix), api: a})
		}
		e, err := quietly(n, conc, etcdOp)
		if err != nil {
			return fmt.Errorf("%s on raw etcd: %w", op, err)
		}
		for _, r := range measured {
			r.etcd = e
			rows = append(rows, r)
		}
		return nil
	}
	if err := measure("GET", c.gets, c.concurrency,
		func(api nodusv1client.NodusV1Interface, i int) error {
			_, err := api.ReservedHosts("bench").Get(ctx, names[i%len(names)], metav1.GetOptions{})
			return err
		},
		func(i int) error { _, err := etcd.Get(ctx, key(i)); return err }); err != nil {
		return err
	}
	decodeList, err := jsonListDecoder(ctx, api)
	if err != nil {
		return err
	}
	if err := measure(fmt.Sprintf("LIST (%d objects)", c.objects), c.lists, c.concurrency,
		func(api nodusv1client.NodusV1Interface, _ int) error {
			l, err := api.ReservedHosts("bench").List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) != c.objects {
				err = fmt.Errorf("listed %d, want %d", len(l.Items), c.objects)
			}
			return err
		},
		func(int) error {
			r, err := etcd.Get(ctx, "/registry/nodus.dev/reservedhosts/bench/", clientv3.WithPrefix())
			if err == nil && len(r.Kvs) != c.objects {
				err = fmt.Errorf("ranged %d, want %d", len(r.Kvs), c.objects)
			}
			return err
		},
		// The same JSON response, read but not decoded: what the server
		// costs without client-go's decoding (which the JSON row includes,
		// and raw etcd's Range does not need).
		variant{"JSON, not decoded", func(int) error {
			raw, err := api.RESTClient().Get().Namespace("bench").Resource("reservedhosts").DoRaw(ctx)
			// Each item has a resourceVersion, and so has the list.
			if n := bytes.Count(raw, []byte(`"resourceVersion":`)) - 1; err == nil && n != c.objects {
				err = fmt.Errorf("listed %d, want %d", n, c.objects)
			}
			return err
		}},
		// The JSON client's decoding alone, of a body read once: what a JSON
		// LIST costs its client however fast the server is. The JSON row's
		// ratio cannot exceed this row's.
		variant{"JSON, decoding alone", func(int) error { return decodeList(c.objects) }}); err != nil {
		return err
	}
	// Each update changes the object so that the API really writes. Workers
	// take indexes in order, so no two update the same host at once while
	// there are more hosts than workers.
	seq := 0
	if err := measure("UPDATE", c.updates, c.concurrency,
		func(api nodusv1client.NodusV1Interface, i int) error {
			latestMu.Lock()
			h := latest[i%len(latest)].DeepCopy()
			seq++
			h.Labels = map[string]string{"seq": fmt.Sprint(seq)}
			latestMu.Unlock()
			updated, err := api.ReservedHosts("bench").Update(ctx, h, metav1.UpdateOptions{})
			if err == nil {
				latestMu.Lock()
				latest[i%len(latest)] = updated
				latestMu.Unlock()
			}
			return err
		},
		func(i int) error { _, err := etcd.Put(ctx, "/bench-raw/"+names[i%len(names)], value); return err }); err != nil {
		return err
	}
	printCRUD(rows, c, len(value))
	for _, r := range rows {
		if r.op == "UPDATE" {
			updateRate = r.api.perSecond
		}
	}
	return nil
}

// updateRate is the JSON client's UPDATE rate of this run's crud scenario,
// the allocation rate's baseline (issue 16); 0 when crud did not run.
var updateRate float64

// jsonListDecoder reads the ReservedHosts of bench once, as JSON, and
// returns a function that decodes that body as client-go's JSON client does
// (the clientset's codecs without conversion) and checks the count.
func jsonListDecoder(ctx context.Context, api nodusv1client.NodusV1Interface) (func(want int) error, error) {
	body, err := api.RESTClient().Get().Namespace("bench").Resource("reservedhosts").
		SetHeader("Accept", runtime.ContentTypeJSON).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("LIST as JSON: %w", err)
	}
	codecs := clientscheme.Codecs.WithoutConversion()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return nil, fmt.Errorf("the clientset has no JSON serializer")
	}
	decoder := codecs.DecoderToVersion(info.Serializer, nodusv1.SchemeGroupVersion)
	return func(want int) error {
		var list nodusv1.ReservedHostList
		if _, _, err := decoder.Decode(body, nil, &list); err != nil {
			return err
		}
		if len(list.Items) != want {
			return fmt.Errorf("decoded %d, want %d", len(list.Items), want)
		}
		return nil
	}, nil
}

// withSuffix names an operation's row for a client other than JSON:
// "GET (protobuf)", "LIST (1000 objects, protobuf)".
func withSuffix(op, suffix string) string {
	switch {
	case suffix == "":
		return op
	case strings.HasSuffix(op, ")"):
		return strings.TrimSuffix(op, ")") + ", " + suffix + ")"
	default:
		return op + " (" + suffix + ")"
	}
}

// variant is one more way to make a measured request, named by its suffix.
type variant struct {
	suffix string
	op     func(i int) error
}

type row struct {
	op        string
	api, etcd result
}

func printCRUD(rows []row, c config, objectBytes int) {
	fmt.Printf("CRUD: %d ReservedHosts of %d bytes in etcd, %d concurrent clients, one embedded etcd\n", c.objects, objectBytes, c.concurrency)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "operation\tAPI ops/s\tAPI p50\tAPI p99\tetcd ops/s\tetcd p50\tetcd p99\tAPI/etcd throughput\t")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%.0f\t%s\t%s\t%.2f\t\n", r.op, r.api.perSecond, r.api.p50, r.api.p99,
			r.etcd.perSecond, r.etcd.p50, r.etcd.p99, r.api.perSecond/r.etcd.perSecond)
	}
	w.Flush()
	fmt.Println()
}

func host(name string) *nodusv1.ReservedHost {
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	end := metav1.NewTime(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	gpus := make([]nodusv1.NodeGPU, 8)
	for i := range gpus {
		gpus[i] = nodusv1.NodeGPU{Type: "h100-sxm-80g", MemoryMiB: 81559, Driver: "550.54.15"}
	}
	return &nodusv1.ReservedHost{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"},
		Status: nodusv1.ReservedHostStatus{
			Inventory: nodusv1.NodeInventory{CPU: 224, MemoryMiB: 2 << 20, DiskGiB: 3500, GPUs: gpus, OS: "Ubuntu 24.04", NodusdVersion: "0.1.0"},
			Pool:      "fra1",
			Connect:   &nodusv1.ReservedHostConnect{Command: "nodus ssh bench/" + name, Host: name + ".bench.nodus", HostKey: testfleet.HostKey(name), LoginUser: "ubuntu"},
			Reservation: nodusv1.HostReservation{Project: "bench", StartsAt: start, EndsAt: end, LoginUser: "ubuntu", Epoch: 1,
				State: nodusv1.ReservationStateActive},
		},
	}
}
