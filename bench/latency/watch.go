package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// seen is when the harness's pod watch first delivered each state of one pod, on this
// process's clock (the API's timestamps have one-second resolution).
type seen struct {
	created       time.Time // set by the harness just before its create call
	unschedulable time.Time // PodScheduled False, reason Unschedulable
	planned       time.Time // the plan record, condition slicer.dev/DefragmentationPlan
	bound         time.Time // spec.nodeName set
	running       time.Time // phase Running
	finished      time.Time // phase Succeeded or Failed
	deleting      time.Time // deletionTimestamp set (deleted or evicted)
	gone          time.Time // deleted from the API
}

// podWatch keeps, for every pod of one namespace, the first time each state was seen.
type podWatch struct {
	mu   sync.Mutex
	pods map[string]*seen
}

// watchPods starts an informer on the pods of ns and returns once it has synced; it runs
// until ctx ends.
func watchPods(ctx context.Context, cs kubernetes.Interface, ns string) (*podWatch, error) {
	w := &podWatch{pods: map[string]*seen{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { w.onPod(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			w.onPod(obj, true)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	f.Start(ctx.Done())
	for _, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, errors.New("pod watch did not sync")
		}
	}
	return w, nil
}

func (w *podWatch) onPod(obj any, deleted bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.pods[p.Name]
	if s == nil {
		s = &seen{}
		w.pods[p.Name] = s
	}
	first := func(t *time.Time, cond bool) {
		if cond && t.IsZero() {
			*t = now
		}
	}
	first(&s.bound, p.Spec.NodeName != "")
	first(&s.running, p.Status.Phase == corev1.PodRunning)
	first(&s.finished, p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
	first(&s.deleting, p.DeletionTimestamp != nil)
	first(&s.gone, deleted)
	for _, c := range p.Status.Conditions {
		first(&s.planned, c.Type == slicerv1alpha1.PodConditionDefragmentationPlan)
		first(&s.unschedulable, c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable)
	}
}

// creating records that the harness is about to create the pod name: a pod of that name
// seen before is forgotten.
func (w *podWatch) creating(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[name] = &seen{created: time.Now()}
}

// get is a copy of what was seen of the pod name (zero times where nothing was).
func (w *podWatch) get(name string) seen {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.pods[name]; s != nil {
		return *s
	}
	return seen{}
}

// waitFor polls the watch every 10 ms until ok holds for the pod name; after timeout it
// fails saying what it waited for.
func (w *podWatch) waitFor(ctx context.Context, name, what string, timeout time.Duration, ok func(seen) bool) (seen, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if s := w.get(name); ok(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return w.get(name), fmt.Errorf("pod %s not %s within %s", name, what, timeout)
		case <-t.C:
		}
	}
}

func isRunning(s seen) bool       { return !s.running.IsZero() }
func isBound(s seen) bool         { return !s.bound.IsZero() }
func isGone(s seen) bool          { return !s.gone.IsZero() }
func isUnschedulable(s seen) bool { return !s.unschedulable.IsZero() }
