package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// A value of the chart: a leaf with its default and JSON schema, or a group
// of values. values.yaml, values.schema.json and README.md's table are all
// written from this one tree, so each value is documented where it is set
// and checked where it is read.
type value struct {
	key      string
	doc      string
	def      any // leaf only
	schema   obj // leaf only, without description
	children []value
}

func (v value) leaf() bool { return v.children == nil }

// imageRef: [registry[:port]/]repository[:tag][@sha256:digest], lower-case
// repository as the distribution spec requires.
const imageRef = `^[a-z0-9][a-z0-9._/-]*(:[0-9]+/[a-z0-9._/-]+)?(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$`

// quantity is a Kubernetes resource quantity (the pattern apiextensions
// gives int-or-string quantities).
var quantity = obj{"anyOf": []any{
	obj{"type": "string", "pattern": `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`},
	obj{"type": "number", "minimum": 0},
}}

func valuesTree(ns string, images map[string]string, d operatorDefaults, sampleSpec, specSchema obj) []value {
	var imgs []value
	keys := make([]string, 0, len(images))
	for k := range images {
		if k != "operator" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	imgs = append(imgs, value{key: "operator", doc: "The operator's own image (config/manager).", def: images["operator"],
		schema: obj{"type": "string", "pattern": imageRef}})
	for _, k := range keys {
		imgs = append(imgs, value{key: k,
			doc:    fmt.Sprintf("The image the operator deploys as RELATED_IMAGE_%s (the bundle's relatedImages entry %q).", strings.ToUpper(k), k),
			def:    images[k],
			schema: obj{"type": "string", "pattern": imageRef}})
	}
	resourceList := obj{"type": "object", "additionalProperties": quantity}
	return []value{
		{key: "namespace", doc: "Where the operator runs; its operands follow it, and the agent runs in NAME-agent, which the operator creates.", children: []value{
			{key: "name", doc: "The operator's namespace, whatever the release's namespace (DNS label of at most 57 characters, so NAME-agent fits 63).", def: ns,
				schema: obj{"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 57}},
			{key: "create", doc: "Create the namespace, with Pod Security restricted as config/default does. The release must then be stored in another namespace (helm install without -n, or -n default); false: the namespace must exist (helm -n NAME --create-namespace).", def: true,
				schema: obj{"type": "boolean"}},
		}},
		{key: "images", doc: "Image references: [registry/]repository[:tag][@sha256:digest]. The operator passes the operand images to what it deploys.", children: imgs},
		{key: "operator", doc: "The operator's Deployment.", children: []value{
			{key: "imagePullPolicy", doc: "The operator container's image pull policy.", def: d.pullPolicy,
				schema: obj{"type": "string", "enum": []any{"Always", "IfNotPresent", "Never"}}},
			{key: "resources", doc: "The operator container's resource requests and limits.", def: d.resources,
				schema: obj{"type": "object", "additionalProperties": false, "properties": obj{"requests": resourceList, "limits": resourceList}}},
			{key: "nodeSelector", doc: "Node labels the operator pod must match.", def: obj{},
				schema: obj{"type": "object", "additionalProperties": obj{"type": "string"}}},
			{key: "tolerations", doc: "Tolerations of the operator pod.", def: []any{},
				schema: obj{"type": "array", "items": obj{"type": "object", "additionalProperties": false, "properties": obj{
					"key":               obj{"type": "string"},
					"operator":          obj{"type": "string", "enum": []any{"Exists", "Equal"}},
					"value":             obj{"type": "string"},
					"effect":            obj{"type": "string", "enum": []any{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}},
					"tolerationSeconds": obj{"type": "integer"},
				}}}},
		}},
		{key: "slicer", doc: "The Slicer resource (cluster-scoped, named default: the one the operator reconciles).", children: []value{
			{key: "create", doc: "Make the Slicer part of the release; helm uninstall's pre-delete hook then deletes it, and waits for the operator's teardown, before the operator goes. false: you create and delete it; helm uninstall refuses while it exists (its finalizer needs the operator).", def: true,
				schema: obj{"type": "boolean"}},
			{key: "spec", doc: "The Slicer's spec (docs/operator.md), checked against the Slicer CRD's schema; the default is config/samples' Slicer. Helm merges what you set into it: set a field to null to drop it.", def: sampleSpec,
				schema: specSchema},
		}},
		{key: "uninstall", doc: "helm uninstall's pre-delete hook: a Job (the operator's image, slicer-operator uninstall-release) that deletes the release's Slicer and waits until the operator has torn it down (docs/uninstall.md).", children: []value{
			{key: "timeoutSeconds", doc: "How long the hook waits for the Slicer to go before it fails the uninstall, naming what is left and what the Slicer's SlicesReleased condition says (pods holding MIG slices under spec.uninstall.policy Wait); nothing is deleted then. Keep helm uninstall's --timeout (5m by default) longer.", def: 240,
				schema: obj{"type": "integer", "minimum": 10, "maximum": 86400}},
		}},
	}
}

// crdSpecSchema is the storage version's schema of spec, for values.schema.json.
func crdSpecSchema(crd obj) obj {
	for _, v := range asList(dig(crd, "spec", "versions")) {
		v := v.(obj)
		if v["storage"] == true {
			if s, ok := dig(v, "schema", "openAPIV3Schema", "properties", "spec").(obj); ok {
				return s
			}
		}
	}
	return obj{"type": "object"}
}

func valuesYAML(tree []value) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Generated by hack/chart (make chart) from config/; do not edit.\n# Every value is checked by values.schema.json.\n")
	if err := writeValues(&b, tree, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeValues(b *bytes.Buffer, vs []value, depth int) error {
	ind := strings.Repeat("  ", depth)
	for _, v := range vs {
		for _, l := range wrap(v.doc, 88) {
			fmt.Fprintf(b, "%s# %s\n", ind, l)
		}
		if !v.leaf() {
			fmt.Fprintf(b, "%s%s:\n", ind, v.key)
			if err := writeValues(b, v.children, depth+1); err != nil {
				return err
			}
			continue
		}
		y, err := yaml.Marshal(v.def)
		if err != nil {
			return fmt.Errorf("value %s: %w", v.key, err)
		}
		s := strings.TrimSuffix(string(y), "\n")
		nonEmpty := false
		switch d := v.def.(type) {
		case obj:
			nonEmpty = len(d) > 0
		case []any:
			nonEmpty = len(d) > 0
		}
		if nonEmpty {
			fmt.Fprintf(b, "%s%s:\n", ind, v.key)
			for _, l := range strings.Split(s, "\n") {
				fmt.Fprintf(b, "%s  %s\n", ind, l)
			}
			continue
		}
		fmt.Fprintf(b, "%s%s: %s\n", ind, v.key, s)
	}
	return nil
}

func schemaJSON(tree []value) ([]byte, error) {
	s := groupSchema(tree)
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["title"] = "Values of the slicer chart"
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal schema: %w", err)
	}
	return append(b, '\n'), nil
}

func groupSchema(vs []value) obj {
	props := obj{}
	var required []any
	for _, v := range vs {
		var s obj
		if v.leaf() {
			s = obj{}
			for k, x := range v.schema {
				s[k] = x
			}
		} else {
			s = groupSchema(v.children)
		}
		s["description"] = v.doc
		props[v.key] = s
		required = append(required, v.key)
	}
	return obj{"type": "object", "additionalProperties": false, "properties": props, "required": required}
}

func readme(tree []value) string {
	var b strings.Builder
	b.WriteString(`<!-- Generated by hack/chart (make chart) from config/; do not edit. -->
# slicer chart

Slicer's CRDs (crds/), its operator with the operator's RBAC, namespace and
metrics Service, and the Slicer resource: what ` + "`kubectl apply -k config/default`" + `
installs, generated from the same files (docs/install.md).

` + "```sh" + `
helm install slicer charts/slicer                     # release in the current namespace; operator in slicer-system
kubectl wait --for=condition=Available slicer/default --timeout=10m
# uninstall: a pre-delete hook deletes the Slicer and waits for the operator's teardown first
helm uninstall slicer
` + "```" + `

The pre-delete hook (templates/uninstall-hook.yaml) runs before Helm deletes
anything: a Job with the operator's image deletes the Slicer and waits until
the operator's finalizer has torn it down (helm uninstall would otherwise
delete the operator first and strand the Slicer). Under the Slicer's
` + "`spec.uninstall.policy: Wait`" + ` (the default) with pods holding MIG slices, the
hook fails after ` + "`uninstall.timeoutSeconds`" + `, Helm prints its log (the
SlicesReleased condition, naming the pods) and deletes nothing; delete the pods
or set ` + "`Force`" + `, then run helm uninstall again. ` + "`helm uninstall --no-hooks`" + `
skips the hook and strands the Slicer: do not.

Helm installs crds/ only on install and never changes or deletes them: before
an upgrade that changes them, ` + "`kubectl apply --server-side -f charts/slicer/crds`" + `.

| value | default | description |
|---|---|---|
`)
	var walk func(prefix string, vs []value)
	walk = func(prefix string, vs []value) {
		for _, v := range vs {
			if !v.leaf() {
				walk(prefix+v.key+".", v.children)
				continue
			}
			def := "see values.yaml"
			switch d := v.def.(type) {
			case string, bool, int:
				def = fmt.Sprintf("`%v`", d)
			case obj:
				if len(d) == 0 {
					def = "`{}`"
				}
			case []any:
				if len(d) == 0 {
					def = "`[]`"
				}
			}
			fmt.Fprintf(&b, "| `%s%s` | %s | %s |\n", prefix, v.key, def, strings.ReplaceAll(v.doc, "|", `\|`))
		}
	}
	walk("", tree)
	return b.String()
}

func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
