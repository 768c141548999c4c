// glidemq proxy API explorer: reads ../openapi.json and builds a form per operation. No
// framework, no inline code (the page's CSP allows only files of this server), no eval.
"use strict";
(function () {
  var base = location.pathname.replace(/\/docs\/?$/, "");  // the proxy's mount path

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (attrs[k] === null || attrs[k] === undefined) return;
      if (k === "text") node.textContent = attrs[k]; else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) node.appendChild(c); });
    return node;
  }

  function skeleton(schema) {
    var out = {};
    var props = (schema && schema.properties) || {};
    (schema.required || []).forEach(function (name) {
      var t = props[name] && props[name].type;
      out[name] = t === "string" ? "" : t === "array" ? [] : t === "object" ? {} : null;
    });
    if ("data" in props && !("data" in out)) out.data = {};
    return JSON.stringify(out, null, 2);
  }

  function operation(path, method, op) {
    var id = op.operationId;
    var params = op.parameters || [];
    var body = op.requestBody && op.requestBody.content["application/json"].schema;
    var sse = Object.keys(op.responses).some(function (code) {
      var c = op.responses[code].content;
      return c && c["text/event-stream"];
    });
    var form = el("form", { "class": "try", "data-op": id });
    params.forEach(function (p) {
      form.appendChild(el("label", {}, [
        el("span", { text: p.name + (p.required ? " *" : "") + " (" + p["in"] + ")" }),
        el("input", { name: p.name, "data-in": p["in"], required: p.required ? "required" : null, "aria-label": p.name }),
      ]));
    });
    if (body) {
      var names = Object.keys(body.properties || {}).join(", ");
      form.appendChild(el("label", {}, [
        el("span", { text: "JSON body" }),
        el("textarea", { name: "__body", "aria-label": "JSON body", title: "fields: " + names }),
      ]));
      form.lastChild.lastChild.value = skeleton(body);
      form.appendChild(el("p", { "class": "note", text: "fields: " + names }));
    }
    var problem = el("p", { "class": "bad", hidden: "hidden" });
    var out = el("pre", { "class": "answer", hidden: "hidden" });
    form.appendChild(el("button", { type: "submit", text: sse ? "Open the stream" : "Send" }));
    form.appendChild(problem);
    form.appendChild(out);
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      problem.hidden = true;
      var url = base + path, query = [];
      var missing = [];
      params.forEach(function (p) {
        var v = form.elements[p.name].value;
        if (p["in"] === "path") {
          if (!v) missing.push(p.name);
          url = url.replace("{" + p.name + "}", encodeURIComponent(v));
        } else if (v) {
          query.push(encodeURIComponent(p.name) + "=" + encodeURIComponent(v));
        }
      });
      if (missing.length) { problem.textContent = "fill in: " + missing.join(", "); problem.hidden = false; return; }
      if (query.length) url += "?" + query.join("&");
      if (sse) { window.open(url, "_blank", "noopener"); return; }
      var init = { method: method.toUpperCase(), headers: { accept: "application/json" } };
      if (body) {
        var text = form.elements.__body.value.trim() || "{}";
        try { JSON.parse(text); } catch (err) {
          problem.textContent = "the body is not JSON: " + err.message; problem.hidden = false; return;
        }
        init.headers["content-type"] = "application/json";
        init.body = text;
      }
      out.hidden = false;
      out.textContent = "…";
      fetch(url, init).then(function (r) {
        return r.text().then(function (t) {
          var shown = t;
          try { shown = JSON.stringify(JSON.parse(t), null, 2); } catch (err) { /* not JSON */ }
          out.textContent = "";
          out.appendChild(el("span", { "class": "status " + (r.ok ? "ok" : "err"), "data-status": String(r.status), text: r.status + " " + r.statusText }));
          out.appendChild(document.createTextNode("\n" + shown));
        });
      }).catch(function (err) { out.textContent = "request failed: " + err.message; });
    });
    return el("details", { "class": "op", id: "op-" + id }, [
      el("summary", {}, [
        el("span", { "class": "method " + method, text: method.toUpperCase() }),
        el("span", { "class": "path", text: path }),
        el("span", { "class": "summary", text: op.summary || "" }),
      ]),
      form,
    ]);
  }

  fetch(base + "/openapi.json", { headers: { accept: "application/json" } })
    .then(function (r) { return r.json(); })
    .then(function (doc) {
      var root = document.getElementById("ops");
      document.getElementById("version").textContent = doc.info.title + " " + doc.info.version;
      var groups = {};
      Object.keys(doc.paths).forEach(function (path) {
        Object.keys(doc.paths[path]).forEach(function (method) {
          var op = doc.paths[path][method];
          var tag = (op.tags && op.tags[0]) || "other";
          (groups[tag] = groups[tag] || []).push(operation(path, method, op));
        });
      });
      Object.keys(groups).forEach(function (tag) {
        root.appendChild(el("h2", { text: tag }));
        groups[tag].forEach(function (node) { root.appendChild(node); });
      });
      root.setAttribute("data-ready", "1");
    })
    .catch(function (err) {
      document.getElementById("ops").textContent = "could not read openapi.json: " + err.message;
    });
})();
