// Parley console, Activity screen: charts of GET /v1/stats/series drawn as inline SVG with DOM APIs (no library,
// no inline styles: colours come from classes in ops.css).
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  // The drawing's own coordinate system; CSS scales the whole SVG to the width available.
  const WIDTH = 640;
  const HEIGHT = 220;
  const MARGIN = { left: 56, right: 14, top: 12, bottom: 30 };
  const PLOT_W = WIDTH - MARGIN.left - MARGIN.right;
  const PLOT_H = HEIGHT - MARGIN.top - MARGIN.bottom;

  const RANGES = { "1h": "Last hour", "7d": "Last 7 days" };

  /** What is drawn: one figure per chart, one line per metric of the series route (the contract's names). */
  const CHARTS = [
    { id: "messages", title: "Messages", perBucket: true, metrics: [["messages", "Messages"]] },
    { id: "presence", title: "Active users and open streams", metrics: [["active_users", "Active users"], ["streams_open", "Open streams"]] },
    { id: "backlog", title: "Webhook backlog", metrics: [["webhook_backlog", "Deliveries waiting"]] },
    { id: "latency", title: "Webhook delivery latency", unit: "ms", metrics: [["webhook_latency_ms", "Latency (ms)"]] },
    { id: "push", title: "Push", perBucket: true, metrics: [["push_sent", "Sent"], ["push_failed", "Failed"]] },
    { id: "http", title: "HTTP errors", perBucket: true, metrics: [["http_4xx", "4xx"], ["http_5xx", "5xx"]] },
  ];

  function svg(tag, attributes = {}, ...children) {
    const element = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value !== undefined && value !== null) element.setAttribute(name, String(value));
    }
    for (const child of children) element.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return element;
  }

  /** Two decimals are plenty on a 640-unit canvas, and let the check map points back exactly. */
  const round = (value) => Math.round(value * 100) / 100;

  /** The smallest of 1, 2, 2.5, 5 × 10^k at or above `max`, so tick labels are round numbers. */
  function niceCeiling(max) {
    if (!(max > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(max));
    for (const factor of [1, 2, 2.5, 5, 10]) {
      if (factor * power >= max) return factor * power;
    }
    return 10 * power;
  }

  function formatValue(value) {
    if (value === null || value === undefined) return "no data";
    if (Math.abs(value) >= 10_000) return `${round(value / 1000)}k`;
    return String(round(value));
  }

  function bucketTime(series, index) {
    return series.from + index * series.step_s * 1000;
  }

  function formatBucket(series, index, long = false) {
    const date = new Date(bucketTime(series, index));
    if (series.range === "7d" && !long) return date.toLocaleDateString(undefined, { weekday: "short", day: "numeric" });
    if (series.range === "7d") return date.toLocaleString(undefined, { weekday: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    return date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
  }

  /** Contiguous runs of non-null values: each becomes its own polyline, so a missing bucket is a gap, not a zero. */
  function runs(values) {
    const result = [];
    let current = null;
    values.forEach((value, index) => {
      if (value === null || value === undefined || !Number.isFinite(value)) {
        current = null;
        return;
      }
      if (current === null) {
        current = [];
        result.push(current);
      }
      current.push([index, value]);
    });
    return result;
  }

  /** The scales of one chart; kept on the SVG as data attributes so a reader (or the check) can map points back. */
  function scales(count, yMax) {
    const dx = count > 1 ? PLOT_W / (count - 1) : 0;
    const baseline = MARGIN.top + PLOT_H;
    const perUnit = PLOT_H / yMax;
    return {
      dx, baseline, perUnit, yMax,
      x: (index) => round(MARGIN.left + index * dx),
      y: (value) => round(baseline - value * perUnit),
    };
  }

  function axes(series, scale, count) {
    const group = svg("g", { class: "axes", "aria-hidden": "true" });
    for (let k = 0; k <= 4; k += 1) {
      const value = (scale.yMax * k) / 4;
      const y = scale.y(value);
      group.append(
        svg("line", { class: "grid", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y, y2: y }),
        svg("text", { class: "tick y-tick", x: MARGIN.left - 6, y: y + 4, "text-anchor": "end" }, formatValue(value)));
    }
    // Bucket ticks a quarter of an hour (1h) or a day (7d) apart, labelled with the bucket's start.
    const every = series.range === "7d" ? 24 : 15;
    for (let index = 0; index < count; index += every) {
      const x = scale.x(index);
      group.append(
        svg("line", { class: "tick-mark", x1: x, x2: x, y1: scale.baseline, y2: scale.baseline + 5 }),
        svg("text", { class: "tick x-tick", x, y: scale.baseline + 18, "text-anchor": index === 0 ? "start" : "middle" }, formatBucket(series, index)));
    }
    group.append(
      svg("line", { class: "axis", x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: scale.baseline }),
      svg("line", { class: "axis", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: scale.baseline, y2: scale.baseline }));
    return group;
  }

  /** Latest and largest value of a metric, in words, for the chart's text alternative. */
  function summary(series, label, values) {
    let latest = null;
    let max = null;
    values.forEach((value, index) => {
      if (value === null || value === undefined) return;
      latest = index;
      if (max === null || value > values[max]) max = index;
    });
    if (latest === null) return `${label}: no data`;
    return `${label}: latest ${formatValue(values[latest])} (${formatBucket(series, latest, true)}), `
      + `max ${formatValue(values[max])} (${formatBucket(series, max, true)})`;
  }

  function chart(series, definition) {
    const stepWord = series.step_s >= 3600 ? "hour" : "minute";
    const title = `${definition.title}${definition.perBucket ? ` per ${stepWord}` : ""}, ${RANGES[series.range].toLowerCase()}`;
    const lines = definition.metrics.map(([metric, label], index) => ({ metric, label, index, values: series.series[metric] }));
    const present = lines.filter((line) => Array.isArray(line.values));
    const figure = h("figure", { class: "chart", "data-chart": definition.id }, h("figcaption", {}, title));
    if (present.length === 0) {
      figure.append(h("p", { class: "empty" }, "The server sent no data for this chart."));
      return figure;
    }
    const count = Math.max(...present.map((line) => line.values.length));
    const max = Math.max(0, ...present.flatMap((line) => line.values.filter((v) => typeof v === "number")));
    const scale = scales(count, niceCeiling(max));
    const label = `${title}. ${present.map((line) => summary(series, line.label, line.values)).join("; ")}.`;
    const drawing = svg("svg", {
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "chart-svg", role: "img", "aria-label": label, preserveAspectRatio: "xMidYMid meet",
      "data-x0": MARGIN.left, "data-dx": scale.dx, "data-baseline": scale.baseline, "data-y-max": scale.yMax, "data-per-unit": scale.perUnit,
      "data-buckets": count,
    });
    drawing.append(axes(series, scale, count));
    for (const line of present) {
      for (const run of runs(line.values)) {
        const points = run.map(([index, value]) => `${scale.x(index)},${scale.y(value)}`).join(" ");
        drawing.append(svg("polyline", { class: `line series-${line.index}`, "data-metric": line.metric, points, fill: "none" }));
        // A run of one bucket draws no line: mark it with a dot so the value is seen.
        if (run.length === 1) {
          drawing.append(svg("circle", { class: `dot series-${line.index}`, "data-metric": line.metric, cx: scale.x(run[0][0]), cy: scale.y(run[0][1]), r: 2.5 }));
        }
      }
    }
    figure.append(
      drawing,
      h("ul", { class: "legend", "aria-label": `Legend of ${definition.title}` },
        present.map((line) => h("li", {}, h("span", { class: `swatch series-${line.index}`, "aria-hidden": "true" }), line.label))),
      dataTable(series, present, definition.title));
    return figure;
  }

  /** The numbers behind a chart, folded away: for screen readers and for reading exact values. */
  function dataTable(series, lines, title) {
    const count = Math.max(...lines.map((line) => line.values.length));
    const rows = [];
    for (let index = count - 1; index >= 0; index -= 1) {
      rows.push(h("tr", {}, h("th", { scope: "row" }, formatBucket(series, index, true)),
        lines.map((line) => h("td", {}, formatValue(line.values[index])))));
    }
    return h("details", { class: "chart-data" }, h("summary", {}, `Data of ${title}`),
      h("div", { class: "table-wrap" }, h("table", {},
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Bucket start"), lines.map((line) => h("th", { scope: "col" }, line.label)))),
        h("tbody", {}, rows))));
  }

  async function activity(main, params) {
    main.append(screenHeading("Activity"));
    if (!session.appID) {
      main.append(h("p", { class: "empty" }, "Choose the app to act for first: on ", h("a", { href: "#apps" }, "Apps and keys"),
        ", press “Act for this app”."));
      return;
    }
    let range = RANGES[params.get("range")] ? params.get("range") : "1h";
    const status = h("p", { class: "muted", role: "status" });
    const grid = h("div", { class: "charts" });
    const switches = Object.entries(RANGES).map(([value, text]) => {
      const element = button(text, () => guarded(async () => {
        range = value;
        setScreenParams({ range });
        await draw();
      }), "secondary");
      element.dataset.range = value;
      return element;
    });

    async function draw() {
      for (const element of switches) element.setAttribute("aria-pressed", String(element.dataset.range === range));
      let series;
      try {
        series = await api("GET", "/v1/stats/series", { query: { range } });
      } catch (error) {
        grid.replaceChildren();
        if (error instanceof Problem && error.status === 404 && !error.problem.code) {
          status.textContent = "This server does not serve GET /v1/stats/series: activity charts need a newer Parley server.";
          return;
        }
        throw error;
      }
      status.textContent = `${RANGES[series.range] || series.range}, one point per ${series.step_s} s, from ${formatTime(series.from)} to `
        + `${formatTime(series.to)}; generated ${formatTime(series.generated_at)}. Gaps are buckets without data.`;
      grid.replaceChildren(...CHARTS.map((definition) => chart(series, definition)));
    }

    main.append(
      h("div", { class: "toolbar", role: "group", "aria-label": "Range" }, switches,
        button("Refresh", () => guarded(draw), "secondary")),
      status, grid);
    await draw();
  }

  registerScreen("activity", "Activity", activity);
})();
