package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// object is one decoded document and where it came from.
type object struct {
	file string
	obj  runtime.Object
	meta metav1.Object
	kind string
}

func (o object) name() string { return o.kind + " " + o.meta.GetName() }

// manifests is every object of a directory, by kind and name.
type manifests struct {
	all        []object
	namespace  string // the one Namespace defined, if exactly one
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	services   map[string]*corev1.Service
	accounts   map[string]bool
}

// podTemplate is a workload's pod template with what the checks need.
type podTemplate struct {
	where    string // "DaemonSet ember-agent"
	file     string
	labels   map[string]string
	spec     *corev1.PodSpec
	claims   map[string]bool // StatefulSet volumeClaimTemplates
	selector *metav1.LabelSelector
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// checkKubernetes decodes every document of DIR/*.yaml strictly into the
// real API types and checks the rules below; returns the number of objects.
func checkKubernetes(dir, configsOut string, p *problems) int {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		p.add(dir, "no *.yaml files")
		return 0
	}
	sort.Strings(files)
	// Strict: unknown or duplicate fields are errors, not dropped; a value
	// of the wrong type is an error too (as kubectl's --validate=strict).
	decoder := serializer.NewCodecFactory(newScheme(), serializer.EnableStrict).UniversalDeserializer()
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		services: map[string]*corev1.Service{}, accounts: map[string]bool{}}
	seen := map[string]string{}
	for _, file := range files {
		docs, err := splitYAML(file)
		if err != nil {
			p.add(file, "%v", err)
			continue
		}
		for i, doc := range docs {
			obj, gvk, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				p.add(file, "document %d: %v", i+1, err)
				continue
			}
			meta, ok := obj.(metav1.Object)
			if !ok {
				p.add(file, "document %d: %s has no metadata", i+1, gvk.Kind)
				continue
			}
			o := object{file: file, obj: obj, meta: meta, kind: gvk.Kind}
			if meta.GetName() == "" {
				p.add(file, "document %d: %s without metadata.name", i+1, gvk.Kind)
				continue
			}
			key := o.kind + "/" + meta.GetNamespace() + "/" + meta.GetName()
			if prev, dup := seen[key]; dup {
				p.add(file, "%s is defined twice (also in %s)", o.name(), prev)
			}
			seen[key] = file
			m.all = append(m.all, o)
			switch v := obj.(type) {
			case *corev1.Namespace:
				if m.namespace == "" {
					m.namespace = v.Name
				} else {
					m.namespace = "\x00" // more than one: no default to check against
				}
			case *corev1.ConfigMap:
				m.configMaps[v.Name] = v
			case *corev1.Secret:
				m.secrets[v.Name] = v
			case *corev1.Service:
				m.services[v.Name] = v
			case *corev1.ServiceAccount:
				m.accounts[v.Name] = true
			}
		}
	}
	var pods []podTemplate
	for _, o := range m.all {
		checkNamespace(o, m, p)
		switch v := o.obj.(type) {
		case *appsv1.DaemonSet:
			pods = append(pods, podTemplate{where: o.name(), file: o.file, labels: v.Spec.Template.Labels,
				spec: &v.Spec.Template.Spec, selector: v.Spec.Selector})
		case *appsv1.Deployment:
			pods = append(pods, podTemplate{where: o.name(), file: o.file, labels: v.Spec.Template.Labels,
				spec: &v.Spec.Template.Spec, selector: v.Spec.Selector})
		case *appsv1.StatefulSet:
			claims := map[string]bool{}
			for _, c := range v.Spec.VolumeClaimTemplates {
				claims[c.Name] = true
			}
			pt := podTemplate{where: o.name(), file: o.file, labels: v.Spec.Template.Labels,
				spec: &v.Spec.Template.Spec, claims: claims, selector: v.Spec.Selector}
			pods = append(pods, pt)
			checkStatefulSetService(o, v, pt, m, p)
		}
	}
	for _, pt := range pods {
		checkSelector(pt, p)
		checkPodSpec(pt, m, p)
	}
	for _, o := range m.all {
		if s, ok := o.obj.(*corev1.Service); ok {
			checkService(o, s, pods, p)
		}
	}
	if configsOut != "" {
		writeConfigs(configsOut, m, p)
	}
	return len(m.all)
}

// splitYAML returns the non-empty documents of a multi-document YAML file.
func splitYAML(file string) ([][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

// stripComments drops comment lines, to tell an empty document from one
// that only has comments.
func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out.Write(l)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// Kinds that live outside namespaces.
var clusterScoped = map[string]bool{"Namespace": true, "PersistentVolume": true, "ClusterRole": true,
	"ClusterRoleBinding": true, "PriorityClass": true, "StorageClass": true}

// checkNamespace: with one Namespace in the directory, every namespaced
// object names it (an object without one would land in the client's
// current namespace).
func checkNamespace(o object, m *manifests, p *problems) {
	if clusterScoped[o.kind] {
		if o.meta.GetNamespace() != "" {
			p.add(o.file, "%s is cluster-scoped but names namespace %q", o.name(), o.meta.GetNamespace())
		}
		return
	}
	if m.namespace == "" || m.namespace == "\x00" {
		return
	}
	if o.meta.GetNamespace() != m.namespace {
		p.add(o.file, "%s is in namespace %q, not %q (the Namespace defined here)", o.name(), o.meta.GetNamespace(), m.namespace)
	}
}

// checkSelector: a workload's selector is set and selects its own pods.
func checkSelector(pt podTemplate, p *problems) {
	if pt.selector == nil {
		p.add(pt.file, "%s has no spec.selector", pt.where)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(pt.selector)
	if err != nil {
		p.add(pt.file, "%s: spec.selector: %v", pt.where, err)
		return
	}
	if sel.Empty() {
		p.add(pt.file, "%s: spec.selector is empty (it would select every pod)", pt.where)
		return
	}
	if !sel.Matches(labels.Set(pt.labels)) {
		p.add(pt.file, "%s: spec.selector %s does not match the template's labels %v", pt.where, sel, pt.labels)
	}
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkPodSpec: volumes, mounts, ports, probes, resources, security.
func checkPodSpec(pt podTemplate, m *manifests, p *problems) {
	spec, f, w := pt.spec, pt.file, pt.where
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if volumes[v.Name] {
			p.add(f, "%s: volume %q is defined twice", w, v.Name)
		}
		volumes[v.Name] = true
		if pt.claims[v.Name] {
			p.add(f, "%s: volume %q is also a volumeClaimTemplate", w, v.Name)
		}
		if cm := v.ConfigMap; cm != nil {
			def, ok := m.configMaps[cm.Name]
			if !ok {
				if cm.Optional == nil || !*cm.Optional {
					p.add(f, "%s: volume %q names ConfigMap %q, which is not defined here", w, v.Name, cm.Name)
				}
			} else {
				for _, it := range cm.Items {
					if _, ok := def.Data[it.Key]; !ok {
						p.add(f, "%s: volume %q takes key %q of ConfigMap %q, which has no such key", w, v.Name, it.Key, cm.Name)
					}
				}
			}
		}
		if s := v.Secret; s != nil {
			// The Secret may be made by hand (keys are not committed); when
			// it is defined here, its keys must be there.
			if def, ok := m.secrets[s.SecretName]; ok {
				for _, it := range s.Items {
					_, inData := def.Data[it.Key]
					_, inString := def.StringData[it.Key]
					if !inData && !inString {
						p.add(f, "%s: volume %q takes key %q of Secret %q, which has no such key", w, v.Name, it.Key, s.SecretName)
					}
				}
			}
			if s.DefaultMode != nil && *s.DefaultMode&0o007 != 0 {
				p.add(f, "%s: volume %q: secret files readable by others (defaultMode %#o)", w, v.Name, *s.DefaultMode)
			}
		}
	}
	if sa := spec.ServiceAccountName; sa != "" && sa != "default" && !m.accounts[sa] {
		p.add(f, "%s: serviceAccountName %q is not defined here", w, sa)
	}
	if spec.SecurityContext != nil && spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot &&
		spec.SecurityContext.RunAsUser != nil && *spec.SecurityContext.RunAsUser == 0 {
		p.add(f, "%s: runAsNonRoot with runAsUser 0", w)
	}
	if len(spec.Containers) == 0 {
		p.add(f, "%s: no containers", w)
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	names := map[string]bool{}
	for i := range all {
		c := &all[i]
		cw := fmt.Sprintf("%s container %q", w, c.Name)
		if c.Name == "" {
			p.add(f, "%s: a container without a name", w)
		}
		if names[c.Name] {
			p.add(f, "%s: container name %q is used twice", w, c.Name)
		}
		names[c.Name] = true
		checkImage(f, cw, c.Image, p)
		for _, vm := range c.VolumeMounts {
			if !volumes[vm.Name] && !pt.claims[vm.Name] {
				p.add(f, "%s: volumeMount %q names no volume of the pod", cw, vm.Name)
			}
			if vm.MountPath == "" {
				p.add(f, "%s: volumeMount %q has no mountPath", cw, vm.Name)
			}
		}
		env := map[string]bool{}
		for _, e := range c.Env {
			env[e.Name] = true
		}
		for _, arg := range append(append([]string{}, c.Command...), c.Args...) {
			for _, ref := range varRef.FindAllStringSubmatch(arg, -1) {
				if !env[ref[1]] {
					p.add(f, "%s: $(%s) in the command names no env variable (Kubernetes would pass it unexpanded)", cw, ref[1])
				}
			}
		}
		ports := map[string]bool{}
		numbers := map[int32]bool{}
		for _, cp := range c.Ports {
			if cp.Name != "" {
				if ports[cp.Name] {
					p.add(f, "%s: port name %q is used twice", cw, cp.Name)
				}
				ports[cp.Name] = true
			}
			numbers[cp.ContainerPort] = true
		}
		for _, pr := range []struct {
			what  string
			probe *corev1.Probe
		}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
			if pr.probe == nil {
				continue
			}
			var port *intstr.IntOrString
			switch h := pr.probe.ProbeHandler; {
			case h.HTTPGet != nil:
				port = &h.HTTPGet.Port
				if h.HTTPGet.Path == "" {
					p.add(f, "%s: %s has no httpGet.path", cw, pr.what)
				}
			case h.TCPSocket != nil:
				port = &h.TCPSocket.Port
			case h.Exec != nil || h.GRPC != nil:
			default:
				p.add(f, "%s: %s has no handler (httpGet, tcpSocket, exec or grpc)", cw, pr.what)
			}
			if port != nil && !portOf(*port, ports, numbers) {
				p.add(f, "%s: %s port %s is not a port of the container", cw, pr.what, port.String())
			}
		}
		checkResources(f, cw, c.Resources, p)
		checkSecurity(f, cw, c.SecurityContext, p)
	}
}

// portOf: a port given by number or by name is one of the container's.
func portOf(port intstr.IntOrString, names map[string]bool, numbers map[int32]bool) bool {
	if port.Type == intstr.String {
		return names[port.StrVal]
	}
	return numbers[port.IntVal]
}

// checkResources: requests and limits of cpu and memory, requests within
// limits (a container without them can starve its node or be starved).
func checkResources(f, cw string, r corev1.ResourceRequirements, p *problems) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := r.Requests[name]
		lim, hasLim := r.Limits[name]
		if !hasReq {
			p.add(f, "%s: no resources.requests.%s", cw, name)
		}
		if !hasLim {
			p.add(f, "%s: no resources.limits.%s", cw, name)
		}
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			p.add(f, "%s: resources.requests.%s %s is over its limit %s", cw, name, req.String(), lim.String())
		}
	}
}

// checkSecurity: never privileged, no privilege escalation, a read-only
// root file system, capabilities dropped before any is added.
func checkSecurity(f, cw string, sc *corev1.SecurityContext, p *problems) {
	if sc == nil {
		p.add(f, "%s: no securityContext", cw)
		return
	}
	if sc.Privileged != nil && *sc.Privileged {
		p.add(f, "%s: privileged", cw)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.add(f, "%s: allowPrivilegeEscalation is not false", cw)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p.add(f, "%s: readOnlyRootFilesystem is not true", cw)
	}
	if sc.Capabilities == nil {
		p.add(f, "%s: capabilities are not dropped (drop: [ALL])", cw)
		return
	}
	dropsAll := false
	for _, c := range sc.Capabilities.Drop {
		dropsAll = dropsAll || c == "ALL"
	}
	if !dropsAll {
		p.add(f, "%s: capabilities.drop does not list ALL", cw)
	}
	for _, c := range sc.Capabilities.Add {
		if c == "SYS_ADMIN" || c == "ALL" {
			p.add(f, "%s: adds capability %s", cw, c)
		}
		if strings.HasPrefix(string(c), "CAP_") {
			p.add(f, "%s: capability %s: Kubernetes names them without CAP_", cw, c)
		}
	}
}

// checkStatefulSetService: serviceName names a headless Service defined
// here that selects the StatefulSet's pods (it gives them their DNS names).
func checkStatefulSetService(o object, s *appsv1.StatefulSet, pt podTemplate, m *manifests, p *problems) {
	name := s.Spec.ServiceName
	if name == "" {
		p.add(o.file, "%s has no spec.serviceName", o.name())
		return
	}
	svc, ok := m.services[name]
	if !ok {
		p.add(o.file, "%s: serviceName %q names no Service defined here", o.name(), name)
		return
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		p.add(o.file, "%s: serviceName %q is not a headless Service (clusterIP: None)", o.name(), name)
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pt.labels)) {
		p.add(o.file, "%s: Service %q does not select its pods", o.name(), name)
	}
	for _, c := range s.Spec.VolumeClaimTemplates {
		if len(c.Spec.AccessModes) == 0 {
			p.add(o.file, "%s: volumeClaimTemplate %q has no accessModes", o.name(), c.Name)
		}
		if _, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			p.add(o.file, "%s: volumeClaimTemplate %q requests no storage", o.name(), c.Name)
		}
	}
}

// checkService: a Service selects the pods of some workload here, and each
// targetPort is a port of those pods' containers.
func checkService(o object, s *corev1.Service, pods []podTemplate, p *problems) {
	if len(s.Spec.Selector) == 0 {
		return // endpoints managed by hand
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	var selected []podTemplate
	for _, pt := range pods {
		if sel.Matches(labels.Set(pt.labels)) {
			selected = append(selected, pt)
		}
	}
	if len(selected) == 0 {
		p.add(o.file, "%s: selector %s matches the pods of no workload defined here", o.name(), sel)
		return
	}
	if len(s.Spec.Ports) == 0 {
		p.add(o.file, "%s has no ports", o.name())
	}
	for _, sp := range s.Spec.Ports {
		target := sp.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(sp.Port) // defaults to port
		}
		for _, pt := range selected {
			found := false
			for _, c := range pt.spec.Containers {
				names, numbers := map[string]bool{}, map[int32]bool{}
				for _, cp := range c.Ports {
					names[cp.Name] = true
					numbers[cp.ContainerPort] = true
				}
				found = found || portOf(target, names, numbers)
			}
			if !found {
				p.add(o.file, "%s: port %q targets %s, which no container of %s has", o.name(), sp.Name, target.String(), pt.where)
			}
		}
	}
}

// writeConfigs writes OUT/<configmap>/<key> for every key ending in .conf.
func writeConfigs(out string, m *manifests, p *problems) {
	for name, cm := range m.configMaps {
		for key, val := range cm.Data {
			if !strings.HasSuffix(key, ".conf") {
				continue
			}
			dir := filepath.Join(out, name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				p.add(out, "%v", err)
				return
			}
			if err := os.WriteFile(filepath.Join(dir, key), []byte(val), 0o644); err != nil {
				p.add(out, "%v", err)
			}
		}
	}
}
