package jsonlist_test

import (
	"bytes"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/jsonlist"
)

func newScheme(t *testing.T) (*runtime.Scheme, serializer.CodecFactory) {
	t.Helper()
	scheme := runtime.NewScheme()
	utilruntime.Must(nodusv1.AddToScheme(scheme))
	metav1.AddToGroupVersion(scheme, nodusv1.SchemeGroupVersion)
	return scheme, serializer.NewCodecFactory(scheme)
}

// encoders are the stock JSON serializer and the one with the cache, as
// the server negotiates them.
func encoders(t *testing.T, codecs serializer.CodecFactory, listed func(runtime.Object) bool) (stock, cached runtime.Encoder) {
	t.Helper()
	find := func(ns runtime.NegotiatedSerializer) runtime.Encoder {
		info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeJSON)
		if !ok {
			t.Fatal("no JSON serializer")
		}
		return ns.EncoderForVersion(info.Serializer, nodusv1.SchemeGroupVersion)
	}
	return find(codecs), find(jsonlist.NegotiatedSerializer(codecs, jsonlist.NewCache(64<<20), listed))
}

func encode(t *testing.T, e runtime.Encoder, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := e.Encode(obj, &buf); err != nil {
		t.Fatalf("encode %T: %v", obj, err)
	}
	return buf.Bytes()
}

func listKinds(scheme *runtime.Scheme) []string {
	var kinds []string
	for kind := range scheme.KnownTypes(nodusv1.SchemeGroupVersion) {
		if strings.HasSuffix(kind, "List") {
			kinds = append(kinds, kind)
		}
	}
	return kinds
}

// Every list of every Nodus kind, filled at random (strings with HTML
// characters and any rune, maps, nil and empty slices), is written byte for
// byte as the library's JSON serializer writes it: the first time, from
// encoding/json, and the second, from the cache.
func TestListsAreWrittenAsTheJSONSerializerWritesThem(t *testing.T) {
	scheme, codecs := newScheme(t)
	stock, cached := encoders(t, codecs, jsonlist.Lists(scheme, nodusv1.SchemeGroupVersion))
	fill := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(16), codecs).NilChance(.2).NumElements(0, 4)
	kinds := listKinds(scheme)
	if len(kinds) < 8 {
		t.Fatalf("only %d list kinds in the scheme: %v", len(kinds), kinds)
	}
	for _, kind := range kinds {
		for i := range 30 {
			list, err := scheme.New(nodusv1.SchemeGroupVersion.WithKind(kind))
			if err != nil {
				t.Fatal(err)
			}
			fill.Fill(list)
			want := encode(t, stock, list)
			for _, pass := range []string{"cold", "warm"} {
				if got := encode(t, cached, list); !bytes.Equal(got, want) {
					t.Fatalf("%s #%d, %s cache:\n got %s\nwant %s", kind, i, pass, got, want)
				}
			}
		}
	}
}

func hostList(names ...string) *nodusv1.ReservedHostList {
	list := &nodusv1.ReservedHostList{ListMeta: metav1.ListMeta{ResourceVersion: "100"}}
	for i, name := range names {
		list.Items = append(list.Items, nodusv1.ReservedHost{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "acme", UID: types.UID("uid-" + name), ResourceVersion: "1" + strings.Repeat("0", i),
		}})
	}
	return list
}

// The cache answers for an item by its UID and resourceVersion: an object
// changed without a new resourceVersion (which no stored object is) comes
// back as cached, which shows the cache was read; with a new
// resourceVersion, as it is now.
func TestAnItemIsReadFromTheCacheUntilItsResourceVersionChanges(t *testing.T) {
	scheme, codecs := newScheme(t)
	stock, cached := encoders(t, codecs, jsonlist.Lists(scheme, nodusv1.SchemeGroupVersion))
	list := hostList("a", "b", "c")
	first := encode(t, cached, list)
	list.Items[1].Labels = map[string]string{"changed": "yes"}
	if got := encode(t, cached, list); !bytes.Equal(got, first) {
		t.Fatalf("the cache was not read: the change shows without a new resourceVersion:\n%s", got)
	}
	list.Items[1].ResourceVersion = "2000"
	got := encode(t, cached, list)
	if want := encode(t, stock, list); !bytes.Equal(got, want) {
		t.Fatalf("after a new resourceVersion:\n got %s\nwant %s", got, want)
	}
	if !bytes.Contains(got, []byte(`"changed":"yes"`)) {
		t.Fatalf("the changed item is not in the list: %s", got)
	}
	// An item without a UID or a resourceVersion is never cached.
	list.Items[2].UID, list.Items[2].ResourceVersion = "", ""
	encode(t, cached, list)
	list.Items[2].Labels = map[string]string{"uncached": "yes"}
	if got := encode(t, cached, list); !bytes.Contains(got, []byte(`"uncached":"yes"`)) {
		t.Fatalf("an item without UID and resourceVersion came from the cache: %s", got)
	}
}

// Only the Nodus kinds' lists go through the cache: a single object (a
// create's answer carries what the store does not, an AccessToken's
// secret) and every other type are the library's.
func TestOnlyListsOfTheGroupAreCached(t *testing.T) {
	scheme, codecs := newScheme(t)
	listed := jsonlist.Lists(scheme, nodusv1.SchemeGroupVersion)
	for _, kind := range listKinds(scheme) {
		list, _ := scheme.New(nodusv1.SchemeGroupVersion.WithKind(kind))
		if !listed(list) {
			t.Errorf("%s is not cached", kind)
		}
	}
	for _, obj := range []runtime.Object{&nodusv1.ReservedHost{}, &nodusv1.AccessToken{}, &metav1.Status{}, &metav1.List{}, &metav1.PartialObjectMetadataList{}} {
		if listed(obj) {
			t.Errorf("%T is cached", obj)
		}
	}
	stock, cached := encoders(t, codecs, listed)
	token := &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: "t", UID: "u", ResourceVersion: "5"}}
	token.Status.Token = "t.secret"
	encode(t, cached, token)
	token.Status.Token = ""
	if got, want := encode(t, cached, token), encode(t, stock, token); !bytes.Equal(got, want) {
		t.Fatalf("a single object came from the cache:\n got %s\nwant %s", got, want)
	}
}

// A cache holds its bytes in two generations: what is listed again stays,
// what is not leaves.
func TestTheCacheKeepsWhatIsListedAndDropsTheRest(t *testing.T) {
	scheme, codecs := newScheme(t)
	listed := jsonlist.Lists(scheme, nodusv1.SchemeGroupVersion)
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	one := encode(t, codecs.EncoderForVersion(info.Serializer, nodusv1.SchemeGroupVersion), hostList("kept"))
	itemBytes := len(one) // more than one item's JSON
	small := jsonlist.NegotiatedSerializer(codecs, jsonlist.NewCache(4*itemBytes), listed)
	sinfo, _ := runtime.SerializerInfoForMediaType(small.SupportedMediaTypes(), runtime.ContentTypeJSON)
	cached := small.EncoderForVersion(sinfo.Serializer, nodusv1.SchemeGroupVersion)

	kept, dropped := hostList("kept"), hostList("dropped")
	encode(t, cached, kept)
	encode(t, cached, dropped)
	// Many other objects pass through; "kept" is listed between them.
	for i := range 20 {
		encode(t, cached, hostList("other-"+strings.Repeat("x", i)))
		encode(t, cached, kept)
	}
	kept.Items[0].Labels = map[string]string{"changed": "yes"}
	dropped.Items[0].Labels = map[string]string{"changed": "yes"}
	if got := encode(t, cached, kept); bytes.Contains(got, []byte("changed")) {
		t.Errorf("an item listed all along left the cache")
	}
	if got := encode(t, cached, dropped); !bytes.Contains(got, []byte("changed")) {
		t.Errorf("an item not listed for many generations is still cached")
	}
}

// Lists without items are written as the library writes them: null and [].
func TestEmptyListsAreWrittenAsTheJSONSerializerWritesThem(t *testing.T) {
	scheme, codecs := newScheme(t)
	stock, cached := encoders(t, codecs, jsonlist.Lists(scheme, nodusv1.SchemeGroupVersion))
	for _, list := range []*nodusv1.NodeList{{}, {Items: []nodusv1.Node{}}} {
		if got, want := encode(t, cached, list), encode(t, stock, list); !bytes.Equal(got, want) {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

// Lists written at once, of items that change under them, each come out as
// the library writes them (run with -race).
func TestListsWrittenAtOnceShareTheCache(t *testing.T) {
	scheme, codecs := newScheme(t)
	stock, cached := encoders(t, codecs, jsonlist.Lists(scheme, nodusv1.SchemeGroupVersion))
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 50 {
				list := hostList("a", "b", "c", "d")
				for i := range list.Items {
					// Two goroutines in three see the same versions.
					list.Items[i].ResourceVersion = strconv.Itoa(round*10 + i + g%3)
					list.Items[i].Labels = map[string]string{"version": list.Items[i].ResourceVersion}
				}
				var got, want bytes.Buffer
				if err := cached.Encode(list, &got); err != nil {
					errs <- err.Error()
					return
				}
				if err := stock.Encode(list, &want); err != nil {
					errs <- err.Error()
					return
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					errs <- "got " + got.String() + " want " + want.String()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
