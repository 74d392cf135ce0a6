package main

// The schema served as pulumi-command (package `command`): the two resource types vllm-fleet uses,
// `command:local:Command` and `command:remote:Command`, with the property names and shapes of the
// pulumi_command SDK at commandVersion, so that SDK's classes are this provider's front end (and
// upstream's provider, where it can be installed, serves the same program). Written here from the SDK's
// classes, not copied from upstream's schema; descriptions are this provider's own.

import "encoding/json"

type schemaProp struct {
	Type                 string                 `json:"type,omitempty"`
	Ref                  string                 `json:"$ref,omitempty"`
	Items                *schemaProp            `json:"items,omitempty"`
	AdditionalProperties *schemaProp            `json:"additionalProperties,omitempty"`
	Description          string                 `json:"description,omitempty"`
	Secret               bool                   `json:"secret,omitempty"`
	Default              any                    `json:"default,omitempty"`
	ReplaceOnChanges     bool                   `json:"replaceOnChanges,omitempty"`
	Properties           map[string]*schemaProp `json:"properties,omitempty"`
	Required             []string               `json:"required,omitempty"`
	Enum                 []map[string]string    `json:"enum,omitempty"`
}

var (
	strType = &schemaProp{Type: "string"}
	anyType = &schemaProp{Ref: "pulumi.json#/Any"}
	strArr  = &schemaProp{Type: "array", Items: strType}
	strMap  = &schemaProp{Type: "object", AdditionalProperties: strType}
)

func describe(p *schemaProp, d string) *schemaProp {
	c := *p
	c.Description = d
	return &c
}

// commandInputs: the inputs both types share (remote adds connection; local adds its own).
func commandInputs(pkg string, kind string) map[string]*schemaProp {
	return map[string]*schemaProp{
		"create":      describe(strType, "The command to run on create (and on update when `update` is not set)."),
		"update":      describe(strType, "The command to run when an input other than `triggers` changes."),
		"delete":      describe(strType, "The command to run when the resource is destroyed."),
		"environment": describe(strMap, "Variables added to the command's environment (never its argv)."),
		"stdin":       describe(strType, "Text given to the command on standard input."),
		"triggers": {Type: "array", Items: anyType, ReplaceOnChanges: true,
			Description: "A change of any of these replaces the resource (delete, then create)."},
		"logging": {Ref: "#/types/" + pkg + ":" + kind + ":Logging",
			Description: "Accepted for compatibility; output is captured (its tail kept in stdout/stderr)."},
		"addPreviousOutputInEnv": {Type: "boolean", Default: true,
			Description: "Give update and delete the last run's output as PULUMI_COMMAND_STDOUT/STDERR."},
	}
}

func commandOutputs(inputs map[string]*schemaProp) map[string]*schemaProp {
	out := map[string]*schemaProp{}
	for k, v := range inputs {
		out[k] = v
	}
	out["stdout"] = describe(strType, "The tail of the command's standard output.")
	out["stderr"] = describe(strType, "The tail of the command's standard error.")
	return out
}

func loggingType() map[string]any {
	var values []map[string]string
	for _, v := range []string{"stdout", "stderr", "stdoutAndStderr", "none"} {
		values = append(values, map[string]string{"value": v})
	}
	return map[string]any{"type": "string", "enum": values}
}

func commandSchema() string {
	pkg := commandPkg
	local := commandInputs(pkg, "local")
	local["dir"] = describe(strType, "The directory the command runs in.")
	local["interpreter"] = describe(strArr, "The program and arguments the command is given to (default: /bin/sh -c).")
	local["assetPaths"] = describe(strArr, "Not supported by this provider (refused).")
	local["archivePaths"] = describe(strArr, "Not supported by this provider (refused).")
	localOut := commandOutputs(local)
	localOut["assets"] = &schemaProp{Type: "object", AdditionalProperties: &schemaProp{Ref: "pulumi.json#/Asset"}}
	localOut["archive"] = &schemaProp{Ref: "pulumi.json#/Archive"}

	remote := commandInputs(pkg, "remote")
	remote["connection"] = &schemaProp{Ref: "#/types/" + pkg + ":remote:Connection", Secret: true,
		Description: "The SSH connection; hostKey is required by this provider (the host key is always pinned)."}
	conn := map[string]*schemaProp{
		"host":               describe(strType, "The address to connect to."),
		"port":               {Type: "number", Default: 22, Description: "The SSH port."},
		"user":               {Type: "string", Default: "root", Description: "The user to log in as."},
		"privateKey":         {Type: "string", Secret: true, Description: "An unencrypted private key (served from an in-memory agent)."},
		"hostKey":            describe(strType, "The host's public key, \"<type> <base64>\": pinned, strict checking."),
		"agentSocketPath":    describe(strType, "An SSH agent's socket to authenticate with."),
		"perDialTimeout":     {Type: "integer", Default: 15, Description: "Seconds to wait for the connection."},
		"dialErrorLimit":     {Type: "integer", Default: 10, Description: "Accepted for compatibility."},
		"password":           {Type: "string", Secret: true, Description: "Not supported by this provider (refused)."},
		"privateKeyPassword": {Type: "string", Secret: true, Description: "Not supported by this provider (refused)."},
		"proxy":              {Ref: "#/types/" + pkg + ":remote:ProxyConnection", Description: "Not supported by this provider (refused)."},
	}
	proxy := map[string]*schemaProp{}
	for k, v := range conn {
		if k != "proxy" {
			proxy[k] = v
		}
	}
	resource := func(desc string, inputs, outputs map[string]*schemaProp, required ...string) map[string]any {
		return map[string]any{
			"description": desc, "inputProperties": inputs, "properties": outputs,
			"required": []string{"stdout", "stderr"}, "requiredInputs": append([]string{}, required...),
		}
	}
	remoteOut := commandOutputs(remote)
	s := map[string]any{
		"name":        pkg,
		"version":     commandVersion,
		"displayName": "Command",
		"description": "Local and SSH commands as resources (vllm-fleet's build of the command provider).",
		"config":      map[string]any{},
		"provider":    map[string]any{"description": "The provider type for the command package."},
		"resources": map[string]any{
			pkg + ":local:Command":  resource("A command run on the controller.", local, localOut),
			pkg + ":remote:Command": resource("A script run on a host over SSH, the host key pinned.", remote, remoteOut, "connection"),
		},
		"types": map[string]any{
			pkg + ":local:Logging":  loggingType(),
			pkg + ":remote:Logging": loggingType(),
			pkg + ":remote:Connection": map[string]any{
				"type": "object", "properties": conn, "required": []string{"host"},
			},
			pkg + ":remote:ProxyConnection": map[string]any{
				"type": "object", "properties": proxy, "required": []string{"host"},
			},
		},
		"language": map[string]any{"python": map[string]any{"packageName": "pulumi_command"}},
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // static data: cannot fail
	}
	return string(b)
}
