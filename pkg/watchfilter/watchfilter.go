// Package watchfilter passes on the events of a watch that a function keeps
// (and may change), and, unlike apimachinery's watch.Filter, stops even
// while an event waits for a reader: an HTTP watch handler stops its watch
// and reads no more when its client goes, and a reflector does when it
// stops, which would leave watch.Filter's goroutine blocked for good.
package watchfilter

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// Filter passes on source's events as keep returns them, those it keeps.
func Filter(source watch.Interface, keep func(watch.Event) (watch.Event, bool)) watch.Interface {
	w := &filtered{source: source, keep: keep, result: make(chan watch.Event), stop: make(chan struct{})}
	go w.pass()
	return w
}

type filtered struct {
	source watch.Interface
	keep   func(watch.Event) (watch.Event, bool)
	result chan watch.Event
	stop   chan struct{}
	once   sync.Once
}

func (w *filtered) ResultChan() <-chan watch.Event { return w.result }

func (w *filtered) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.source.Stop()
	})
}

func (w *filtered) pass() {
	defer close(w.result)
	for event := range w.source.ResultChan() {
		event, ok := w.keep(event)
		if !ok {
			continue
		}
		select {
		case w.result <- event:
		case <-w.stop:
			return
		}
	}
}
