// capplan's only script. <x-chart> renders an ECharts option given as JSON in a child
// <script type="application/json">; it manages its own lifecycle, so it works with any htmx swap.
// Plus small behaviours: the pipeline Gantt renderer, copy buttons, the node list following the GPU, the model
// choice following a typed Hugging Face id, a stored config.json sent by its id until edited, and aria-invalid
// following the field messages htmx swaps in.

function ganttItem(params, api) {
  // One bar of the pipeline schedule: value = [stage, start_s, end_s, micro_batch, chunk].
  const stage = api.value(0);
  const start = api.coord([api.value(1), stage]);
  const end = api.coord([api.value(2), stage]);
  const height = api.size([0, 1])[1] * 0.72;
  const cs = params.coordSys;
  const shape = window.echarts.graphic.clipRectByRect(
    { x: start[0], y: start[1] - height / 2, width: Math.max(end[0] - start[0], 0.5), height: height },
    { x: cs.x, y: cs.y, width: cs.width, height: cs.height });
  if (!shape) { return null; }
  const item = { type: 'rect', shape: shape, style: { fill: api.visual('color'), stroke: '#fff', lineWidth: 0.5 } };
  if (shape.width > 16 && height > 10) {
    item.textContent = { style: { text: String(api.value(3)), fill: '#fff', fontSize: 10 } };
    item.textConfig = { position: 'inside' };
  }
  return item;
}

class XChart extends HTMLElement {
  connectedCallback() {
    if (!window.echarts) { return; }
    const src = this.querySelector('script[type="application/json"]');
    if (!src) { return; }
    const height = parseInt(this.dataset.height || '', 10);
    if (height > 0) { this.style.height = height + 'px'; }
    const option = JSON.parse(src.textContent);
    this.chart = window.echarts.init(this, null, { renderer: 'svg' });
    this.chart.setOption(option);
    this.observer = new ResizeObserver(() => this.chart && this.chart.resize());
    this.observer.observe(this);
    this.dataset.ready = 'true';
  }
  disconnectedCallback() {
    if (this.observer) { this.observer.disconnect(); }
    if (this.chart) { this.chart.dispose(); this.chart = null; }
  }
}

function onCopy(event) {
  const button = event.target.closest('button.copy[data-copy]');
  if (!button) { return; }
  const source = document.getElementById(button.dataset.copy);
  if (!source) { return; }
  const label = button.dataset.label || (button.dataset.label = button.textContent);
  const done = () => { button.textContent = 'Copied'; setTimeout(() => { button.textContent = label; }, 1500); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(source.textContent).then(done, () => { button.textContent = 'Select and copy'; });
  } else if (source.hidden) {
    // a hidden source (the share link): copy through a temporary text area
    const area = document.createElement('textarea');
    area.value = source.textContent;
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand && document.execCommand('copy');
    area.remove();
    if (ok) { done(); } else { button.textContent = 'Copy failed: use the link'; }
  } else {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    button.textContent = 'Selected: press Ctrl+C';
  }
}

function syncNodes(gpuSelect) {
  // Only nodes that carry the chosen accelerator are offered; a mismatched choice falls back to auto.
  const nodeSelect = document.querySelector('select[data-follows="' + gpuSelect.id + '"]');
  if (!nodeSelect) { return; }
  for (const option of nodeSelect.options) {
    if (option.dataset.accelerator) { option.hidden = option.dataset.accelerator !== gpuSelect.value; }
  }
  const chosen = nodeSelect.selectedOptions[0];
  if (chosen && chosen.hidden) { nodeSelect.value = ''; }
}

function checkUpload(event) {
  // An over-limit config.json is refused here, before it is sent: the form and its inputs stay as they are.
  const form = event.target;
  if (!form || form.id !== 'hf-upload') { return; }
  const input = form.querySelector('input[type="file"][data-max-bytes]');
  const message = document.getElementById('hf-upload-error');
  const limit = parseInt(input && input.dataset.maxBytes || '', 10);
  const file = input && input.files && input.files[0];
  if (!file || !(limit > 0) || file.size <= limit || !message) { return; }
  event.preventDefault();
  const words = (n) => n >= 1e6 ? (n / 1e6).toFixed(1) + ' MB' : Math.round(n / 1e3) + ' KB';
  message.textContent = 'That file is too large: ' + words(file.size) + '. A config.json upload is limited to ' +
    words(limit) + ' (' + limit.toLocaleString('en-US') + ' bytes). Real config.json files are a few KB; ' +
    'remove any large fields (e.g. id2label) and upload again.';
  message.hidden = false;
  input.setAttribute('aria-invalid', 'true');
}

function readNumber(text) {
  // The form's number syntax: 1,024 · 1e12 · 16M · 15T (k, M, B/G, T).
  const scale = { k: 1e3, K: 1e3, M: 1e6, B: 1e9, G: 1e9, T: 1e12 };
  let t = String(text || '').trim().replace(/[,_\s]/g, '');
  let factor = 1;
  if (t && scale[t.slice(-1)]) { factor = scale[t.slice(-1)]; t = t.slice(0, -1); }
  const n = Number(t) * factor;
  return t !== '' && Number.isFinite(n) ? n : null;
}

function applyLayout(event) {
  // A model picked in the planner: the server searched its layout and sends the fields' new values
  // (HX-Trigger capplan:layout, app/web/plan_start.py). Values are set in place: no field is swapped.
  const values = (event.detail && event.detail.values) || {};
  for (const [name, value] of Object.entries(values)) {
    const field = document.getElementById('f-' + name.replace(/\./g, '-'));
    if (field) { field.value = value; }
  }
}

function convertBatch(event) {
  // "Global batch in": switching sequences <-> tokens converts the value (x or / the sequence length), so the
  // batch stays the same. Runs in the capture phase, before htmx reads the form.
  const unit = event.target;
  if (!unit || unit.id !== 'f-batch_unit') { return; }
  const batch = document.getElementById('f-global_batch');
  const seq = readNumber((document.getElementById('f-seq_len') || {}).value);
  const previous = unit.dataset.unit || (unit.value === 'tokens' ? 'sequences' : 'tokens');
  unit.dataset.unit = unit.value;
  const value = batch ? readNumber(batch.value) : null;
  if (!batch || !seq || value === null || previous === unit.value) { return; }
  const converted = unit.value === 'tokens' ? value * seq : value / seq;
  batch.value = Number.isInteger(converted) ? String(converted) : converted.toFixed(2);
}

function followHubId(event) {
  // Typing a Hugging Face id chooses "Hugging Face id" as the model (capture phase: before htmx reads the form).
  const input = event.target;
  if (!input || input.id !== 'f-hf_id' || !input.value.trim()) { return; }
  const model = document.getElementById('f-model');
  if (model && model.value !== 'hub') { model.value = 'hub'; }
}

function syncInvalid() {
  // htmx swaps in each field's message (out of band), not the field itself: mark the field invalid while its
  // message (the element its aria-describedby names, class field-error) says something.
  for (const field of document.querySelectorAll('form [aria-describedby]')) {
    const messages = field.getAttribute('aria-describedby').split(/\s+/)
      .map((id) => document.getElementById(id))
      .filter((m) => m && m.classList.contains('field-error'));
    if (!messages.length) { continue; }
    const invalid = messages.some((m) => m.textContent.trim() !== '');
    if (invalid) { field.setAttribute('aria-invalid', 'true'); } else { field.removeAttribute('aria-invalid'); }
    const box = field.closest('.field');
    if (box) { box.classList.toggle('invalid', invalid); }
  }
}

function sendStoredConfig() {
  // A config.json the server has stored travels by its id (config=<id>), not whole (a large one would make
  // every update's URL too long), until the user edits it: then the text goes, and the server stores it anew
  // (the results panel says under which id: data-config-id).
  const area = document.getElementById('f-hf_config');
  const ref = document.getElementById('f-config');
  if (!area || !ref) { return; }
  const results = document.getElementById('results');
  if (results && results.dataset.configId !== undefined) {
    ref.value = results.dataset.configId;
    ref.name = 'config';
  }
  const sent = area.dataset.sent !== undefined ? area.dataset.sent : area.defaultValue;
  if (ref.value && area.value === sent) { area.removeAttribute('name'); }
}

function editConfig(event) {
  const area = event.target;
  if (!area || area.id !== 'f-hf_config') { return; }
  area.name = 'hf_config';
  const ref = document.getElementById('f-config');
  if (ref) { ref.removeAttribute('name'); }
}

function rememberSentConfig() {
  const area = document.getElementById('f-hf_config');
  if (area) { area.dataset.sent = area.value; }
}

window.addEventListener('DOMContentLoaded', () => {
  sendStoredConfig();
  document.addEventListener('input', editConfig, true);
  document.addEventListener('htmx:before:request', rememberSentConfig);
  document.addEventListener('htmx:after:swap', sendStoredConfig);
  document.addEventListener('input', followHubId, true);
  document.addEventListener('htmx:after:swap', syncInvalid);
  document.addEventListener('submit', checkUpload);
  const unit = document.getElementById('f-batch_unit');
  if (unit) { unit.dataset.unit = unit.value; }
  document.addEventListener('input', convertBatch, true);
  document.addEventListener('capplan:layout', applyLayout);
  if (window.echarts && !window.__ganttRegistered) {
    window.echarts.registerCustomSeries('pipeline-gantt', ganttItem);
    window.__ganttRegistered = true;
  }
  if (!customElements.get('x-chart')) { customElements.define('x-chart', XChart); }
  document.addEventListener('click', onCopy);
  const gpu = document.getElementById('f-gpu');
  if (gpu) {
    syncNodes(gpu);
    gpu.addEventListener('change', () => syncNodes(gpu));
  }
});
