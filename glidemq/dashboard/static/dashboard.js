// glidemq dashboard: live updates over server-sent events and the throughput chart.
// Plain browser JavaScript, no libraries. Values from the server are only ever set as
// text (textContent) or attributes; HTML comes only from the dashboard's own fragments,
// which the server has escaped.
(function () {
  "use strict";
  var body = document.body;
  var base = body.dataset.base || "";
  var liveQueue = body.dataset.liveQueue || "";
  var liveJob = body.dataset.liveJob || "";
  var SVG = "http://www.w3.org/2000/svg";

  function svgEl(name, attrs) {
    var el = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, String(attrs[k])); });
    return el;
  }

  function two(n) { return n < 10 ? "0" + n : String(n); }

  function drawChart(svg, data) {
    if (!svg || !data) return;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var done = data.completed || [], failed = data.failed || [];
    var n = Math.max(done.length, failed.length);
    var W = Math.max(320, Math.round(svg.getBoundingClientRect().width) || 720);
    var H = 160, left = 34, bottom = 18, top = 8;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    var max = 1;
    for (var i = 0; i < n; i++) max = Math.max(max, (done[i] || 0) + (failed[i] || 0));
    var plotH = H - bottom - top, step = (W - left) / Math.max(n, 1), barW = Math.max(1, step - 2);
    svg.appendChild(svgEl("line", { x1: left, y1: H - bottom, x2: W, y2: H - bottom, "class": "axis" }));
    [0, 0.5, 1].forEach(function (f) {
      var y = H - bottom - f * plotH;
      var label = svgEl("text", { x: left - 4, y: y + 3, "text-anchor": "end" });
      label.textContent = String(Math.round(max * f));
      svg.appendChild(label);
    });
    for (var j = 0; j < n; j++) {
      var c = done[j] || 0, f = failed[j] || 0, x = left + j * step + 1;
      var hc = (c / max) * plotH, hf = (f / max) * plotH;
      var when = new Date(data.start + j * 60000);
      var tip = two(when.getHours()) + ":" + two(when.getMinutes()) + "  completed " + c + ", failed " + f;
      if (c > 0) {
        var rc = svgEl("rect", { x: x, y: H - bottom - hc, width: barW, height: hc, "class": "bar-completed" });
        var tc = svgEl("title", {}); tc.textContent = tip; rc.appendChild(tc); svg.appendChild(rc);
      }
      if (f > 0) {
        var rf = svgEl("rect", { x: x, y: H - bottom - hc - hf, width: barW, height: hf, "class": "bar-failed" });
        var tf = svgEl("title", {}); tf.textContent = tip; rf.appendChild(tf); svg.appendChild(rf);
      }
      if (j % 10 === 0 || j === n - 1) {
        var t = svgEl("text", { x: x, y: H - 4 });
        t.textContent = j === n - 1 ? "now" : two(when.getHours()) + ":" + two(when.getMinutes());
        svg.appendChild(t);
      }
    }
    var sum = function (a) { return a.reduce(function (s, v) { return s + v; }, 0); };
    var ec = document.getElementById("chart-completed"), ef = document.getElementById("chart-failed");
    if (ec) ec.textContent = String(sum(done));
    if (ef) ef.textContent = String(sum(failed));
  }

  function chartData() {
    var svg = document.getElementById("chart");
    if (!svg) return null;
    try { return JSON.parse(svg.getAttribute("data-chart")); } catch (e) { return null; }
  }

  function setText(el, text) { if (el.textContent !== text) el.textContent = text; }

  function applyQueues(queues) {
    Object.keys(queues).forEach(function (name) {
      var q = queues[name];
      document.querySelectorAll("[data-live-count]").forEach(function (el) {
        if (el.getAttribute("data-live-count") !== name) return;
        var s = el.getAttribute("data-state");
        if (s in q.counts) setText(el, String(q.counts[s]));
      });
      document.querySelectorAll("[data-live-paused]").forEach(function (el) {
        if (el.getAttribute("data-live-paused") !== name) return;
        var word = q.paused ? "paused" : "running";
        setText(el, word);
        el.className = "badge " + word;
      });
      document.querySelectorAll("[data-live-workers]").forEach(function (el) {
        if (el.getAttribute("data-live-workers") === name) setText(el, String(q.workers));
      });
    });
  }

  function busy(container) {
    // Do not replace what the user is working with: a ticked box or a focused field.
    if (container.querySelector("input[type=checkbox]:checked")) return true;
    var active = document.activeElement;
    return !!(active && container.contains(active) && active.tagName === "INPUT");
  }

  function refreshFragment(id) {
    var box = document.getElementById(id);
    if (!box || busy(box)) return;
    fetch(box.getAttribute("data-fragment"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null && !busy(box)) { box.innerHTML = html; wire(box); } })
      .catch(function () {});
  }

  var last = { counts: null, job: null };

  function onSnapshot(ev) {
    var snap;
    try { snap = JSON.parse(ev.data); } catch (e) { return; }
    applyQueues(snap.queues || {});
    drawChart(document.getElementById("chart"), snap.chart);
    if (liveQueue && snap.queues && snap.queues[liveQueue]) {
      var counts = JSON.stringify(snap.queues[liveQueue].counts);
      if (last.counts !== null && counts !== last.counts && !liveJob) refreshFragment("jobs");
      last.counts = counts;
    }
    if (liveJob && "job" in snap) {
      var job = JSON.stringify(snap.job);
      if (last.job !== null && job !== last.job) refreshFragment("job-detail");
      last.job = job;
    }
  }

  function connect() {
    if (!window.EventSource) return;
    var url = base + "/live";
    var params = [];
    if (liveQueue) params.push("queue=" + encodeURIComponent(liveQueue));
    if (liveJob) params.push("job=" + encodeURIComponent(liveJob));
    if (params.length) url += "?" + params.join("&");
    var source = new EventSource(url);
    var dot = document.getElementById("live");
    source.addEventListener("open", function () { if (dot) dot.classList.add("on"); });
    source.addEventListener("error", function () {
      if (dot) dot.classList.remove("on");
      // A refusal (503 while the dashboard's live feeds are all taken) closes the source
      // for good; the browser only retries a dropped connection by itself.
      if (source.readyState === EventSource.CLOSED) {
        setTimeout(connect, 5000 + Math.random() * 5000);
      }
    });
    source.addEventListener("snapshot", onSnapshot);
  }

  // JSON editors: refuse to send text that is not JSON (or not an object where one is due).
  function checkJson(form) {
    var problem = "";
    form.querySelectorAll("textarea[data-json]").forEach(function (area) {
      var text = area.value.trim();
      var bad = "";
      if (!text && area.getAttribute("data-json") === "any") {
        bad = "is empty: write the JSON to store (null, {} or a value)";
      } else if (text) {
        try {
          var value = JSON.parse(text);
          if (area.getAttribute("data-json") === "object" && (value === null || typeof value !== "object" || Array.isArray(value))) {
            bad = "must be a JSON object";
          }
        } catch (err) { bad = "is not JSON: " + err.message; }
      }
      area.classList.toggle("invalid", !!bad);
      if (bad && !problem) problem = (area.getAttribute("aria-label") || area.name) + " " + bad;
    });
    var out = form.querySelector(".json-error");
    if (out) { out.textContent = problem; out.hidden = !problem; }
    return !problem;
  }

  // JSON blocks: a Copy button, and a collapsible tree beside the text.
  function tree(value, depth) {
    if (value === null || typeof value !== "object") {
      var leaf = document.createElement("span");
      leaf.className = "json-" + (value === null ? "null" : typeof value);
      leaf.textContent = JSON.stringify(value);
      return leaf;
    }
    var keys = Object.keys(value);
    var box = document.createElement("details");
    if (depth < 2) box.open = true;
    var head = document.createElement("summary");
    head.textContent = Array.isArray(value) ? "[" + keys.length + " items]" : "{" + keys.length + " keys}";
    box.appendChild(head);
    var list = document.createElement("ul");
    keys.forEach(function (k) {
      var item = document.createElement("li");
      var name = document.createElement("span");
      name.className = "json-key";
      name.textContent = (Array.isArray(value) ? k : JSON.stringify(k)) + ": ";
      item.appendChild(name);
      item.appendChild(tree(value[k], depth + 1));
      list.appendChild(item);
    });
    box.appendChild(list);
    return box;
  }

  function tools(root) {
    root.querySelectorAll("pre.block.json, pre.block.copyable").forEach(function (pre) {
      if (pre.previousElementSibling && pre.previousElementSibling.classList.contains("block-tools")) return;
      var bar = document.createElement("div");
      bar.className = "block-tools";
      var copy = document.createElement("button");
      copy.type = "button";
      copy.className = "copy";
      copy.textContent = "Copy";
      copy.addEventListener("click", function () {
        var done = function () { copy.textContent = "Copied"; setTimeout(function () { copy.textContent = "Copy"; }, 1500); };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(pre.textContent).then(done, function () { copy.textContent = "Copy failed"; });
        } else { copy.textContent = "Copy failed"; }
      });
      bar.appendChild(copy);
      var raw = pre.getAttribute("data-json");
      var value;
      try { value = raw === null ? undefined : JSON.parse(raw); } catch (err) { value = undefined; }
      if (value !== null && typeof value === "object") {
        var toggle = document.createElement("button");
        toggle.type = "button";
        toggle.className = "as-tree";
        toggle.textContent = "Tree";
        var view = document.createElement("div");
        view.className = "json-tree block";
        view.hidden = true;
        view.appendChild(tree(value, 0));
        toggle.addEventListener("click", function () {
          view.hidden = !view.hidden;
          pre.hidden = !view.hidden;
          toggle.textContent = view.hidden ? "Tree" : "Text";
        });
        bar.appendChild(toggle);
        pre.parentNode.insertBefore(view, pre.nextSibling);
      }
      pre.parentNode.insertBefore(bar, pre);
    });
  }

  function wire(root) {
    tools(root);
    root.querySelectorAll("form.editor").forEach(function (form) {
      form.addEventListener("submit", function (e) { if (!checkJson(form)) e.preventDefault(); });
      form.querySelectorAll("textarea[data-json]").forEach(function (area) {
        area.addEventListener("input", function () { checkJson(form); });
      });
    });
    root.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        if (!window.confirm(form.getAttribute("data-confirm"))) e.preventDefault();
      });
    });
    var bulk = root.querySelector("#bulk") || (root.id === "bulk" ? root : null);
    if (bulk) {
      bulk.addEventListener("submit", function (e) {
        var button = e.submitter;
        var ask = button && bulk.getAttribute("data-confirm-" + button.value);
        if (ask && !window.confirm(ask)) {
          e.preventDefault();
        }
      });
    }
    var all = root.querySelector("#select-all");
    if (all) {
      all.addEventListener("change", function () {
        document.querySelectorAll("#job-table input[name=id]").forEach(function (box) { box.checked = all.checked; });
      });
    }
  }

  drawChart(document.getElementById("chart"), chartData());
  wire(document);
  connect();
})();
