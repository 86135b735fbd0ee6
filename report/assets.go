package report

// css styles the page; it names no font that must be fetched (system
// fonts only).
const css = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1b1b1b;background:#fafafa;margin:0}
header{background:#1d3557;color:#fff;padding:10px 24px;position:sticky;top:0;z-index:2}
header h1{font-size:18px;margin:0 0 4px}
nav a{color:#cfe3ff;margin-right:14px;text-decoration:none;font-size:13px}
main{margin:0 auto;padding:8px 24px 40px;max-width:2400px}
section{background:#fff;border:1px solid #e3e3e3;border-radius:6px;padding:8px 18px 14px;margin:16px 0}
h2{font-size:17px;margin:8px 0 2px}
h3{font-size:15px;margin:6px 0 2px}
p.q{color:#555;margin:0 0 8px;font-style:italic}
p.meta{color:#444;font-size:13px}
p.note{color:#666;font-size:12px;margin:3px 0}
p.warn{background:#fff3cd;border:1px solid #e0c36a;padding:6px 10px}
section{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(560px,100%),1fr));column-gap:18px;align-items:start}
section>*{grid-column:1/-1}
section>figure.fig{grid-column:auto}
section>figure.fig.wide{grid-column:1/-1}
figure.fig,div.fig{margin:12px 0;display:block;min-width:0}
figure.fig svg,div.fig svg{width:100%;height:auto}
div#waterfall{display:block;width:auto}
figcaption{font-weight:600;margin:0 0 4px}
svg{max-width:100%;height:auto;display:block}
svg text{font-family:inherit;fill:#333}
.tick{font-size:11px}.small{font-size:9.5px}.axis{font-size:12px;fill:#444}.legend{font-size:11.5px}
.ptitle{font-size:12.5px;font-weight:600}.kneelabel{font-size:11px;fill:#b00}.fl{font-size:10.5px;fill:#111;pointer-events:none}
.grid{stroke:#e6e6e6;stroke-width:1}.logtick{stroke:#f0f0f0;stroke-width:1}.axisline{stroke:#999}
.series{stroke-width:2}.dash{stroke-dasharray:6 4}.whisker{stroke-width:1.4;fill:none}
.knee{stroke:#b00;stroke-dasharray:4 3;stroke-width:1.2}
.tl-data *{vector-effect:non-scaling-stroke}
.tls{stroke-width:1.3}
.band{fill:#1d3557;opacity:.07}.band.warm{fill:#e69f00;opacity:.09}
.rq{stroke-width:2.2;cursor:pointer;opacity:.75}.rq:hover,.rq.on{stroke:#d00 !important;stroke-width:4;opacity:1}.rq.bad{stroke:#d00}
.tl-sel{fill:#0072b2;opacity:.15;pointer-events:none}
.tl-wrap{position:relative}
#tl-read{position:absolute;top:4px;right:8px;background:rgba(255,255,255,.93);border:1px solid #ccc;font-size:11.5px;padding:3px 7px;pointer-events:none;display:none;white-space:pre}
.tl-tools button{font-size:12px;margin-right:6px}.hint{color:#777;font-size:12px}
.verdicts{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:10px}
.verdict{border-left:4px solid #d55e00;background:#fdf6f0;padding:4px 10px}
.verdict p.ev{margin:2px 0 4px}.verdict ul{margin:2px 0;padding-left:18px;font-size:12.5px;color:#444}
.tw{overflow-x:auto;margin:8px 0}
table.data{border-collapse:collapse;font-size:12px}
table.data caption{text-align:left;font-weight:600;padding:2px 0}
table.data th,table.data td{border-bottom:1px solid #eee;padding:2px 8px;text-align:left;vertical-align:top}
table.data td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.kv th{text-align:left;padding:1px 12px 1px 0;color:#555;font-weight:600;vertical-align:top}
table.kv td{padding:1px 0}
.delta-sig{font-weight:700}
`

// script adds what needs JavaScript: zooming the timeline, a readout of
// every series under the pointer, and a clicked request's waterfall. The
// page is whole without it.
const script = `
(function(){
var el=document.getElementById('tl-json');if(!el)return;
var D;try{D=JSON.parse(el.textContent)}catch(e){return}
var svg=document.querySelector('svg.timeline');if(!svg||!D.span)return;
var NS='http://www.w3.org/2000/svg';
var datas=svg.querySelectorAll('svg.tl-data');
var axis=svg.querySelector('g.tl-axis');
var ax={y:+axis.dataset.y,l:+axis.dataset.l,w:+axis.dataset.w};
var view=[0,D.span];
function fmt(v){var a=Math.abs(v);if(a>=1000)return v.toFixed(0);if(a>=100)return v.toFixed(1);if(a>=1)return v.toFixed(2);if(v===0)return '0';return v.toPrecision(3)}
function ticks(lo,hi,n){var raw=(hi-lo)/n,mag=Math.pow(10,Math.floor(Math.log10(raw))),st=mag;[1,2,2.5,5,10].some(function(m){if(m*mag>=raw){st=m*mag;return true}});var o=[];for(var v=Math.ceil(lo/st-1e-9)*st;v<=hi+st*1e-9;v+=st)o.push(Math.round(v/st)*st);return o}
function setView(a,b){a=Math.max(0,a);b=Math.min(D.span,b);if(b-a<D.span/20000)return;view=[a,b];
 datas.forEach(function(s){var vb=s.getAttribute('viewBox').split(' ');s.setAttribute('viewBox',a+' 0 '+(b-a)+' '+vb[3])});
 while(axis.firstChild)axis.removeChild(axis.firstChild);
 ticks(a,b,10).forEach(function(t){var x=ax.l+(t-a)/(b-a)*ax.w;var ln=document.createElementNS(NS,'line');ln.setAttribute('x1',x);ln.setAttribute('x2',x);ln.setAttribute('y1',ax.y);ln.setAttribute('y2',ax.y+5);ln.setAttribute('class','axisline');axis.appendChild(ln);var tx=document.createElementNS(NS,'text');tx.setAttribute('x',x);tx.setAttribute('y',ax.y+17);tx.setAttribute('text-anchor','middle');tx.setAttribute('class','tick');tx.textContent=String(parseFloat(t.toFixed(6)));axis.appendChild(tx)});
 var r=document.getElementById('tl-range');if(r)r.textContent='showing '+sec(a)+'–'+sec(b)+' s of '+sec(D.span)+' s'}
function sec(v){return String(parseFloat(v.toFixed(v<10?3:1)))}
function tAt(ev){var pt=svg.createSVGPoint();pt.x=ev.clientX;pt.y=ev.clientY;var p=pt.matrixTransform(svg.getScreenCTM().inverse());return {t:view[0]+(p.x-ax.l)/ax.w*(view[1]-view[0]),x:p.x,y:p.y}}
function valueAt(segs,t){for(var i=0;i<segs.length;i++){var s=segs[i];if(!s.length||t<s[0][0]||t>s[s.length-1][0])continue;var lo=0,hi=s.length-1;while(hi-lo>1){var m=(lo+hi)>>1;if(s[m][0]<=t)lo=m;else hi=m}return s[lo][1]}return null}
var read=document.getElementById('tl-read'),sel=svg.querySelector('.tl-sel'),drag=null;
svg.addEventListener('mousemove',function(ev){var p=tAt(ev);if(p.x<ax.l||p.x>ax.l+ax.w){read.style.display='none';return}
 var lines=['t = '+fmt(p.t)+' s'];D.panels.forEach(function(pn){pn.series.forEach(function(s){var v=valueAt(s.segs,p.t);if(v!==null)lines.push(s.name+': '+fmt(v)+(pn.unit||''))})});
 read.textContent=lines.join('\n');read.style.display='block';
 if(drag){var x0=Math.min(drag.x,p.x),x1=Math.max(drag.x,p.x);sel.setAttribute('x',x0);sel.setAttribute('width',x1-x0)}});
svg.addEventListener('mouseleave',function(){read.style.display='none'});
svg.addEventListener('mousedown',function(ev){if(ev.target.classList.contains('rq'))return;var p=tAt(ev);drag={t:p.t,x:p.x};ev.preventDefault()});
window.addEventListener('mouseup',function(ev){if(!drag)return;var p=tAt(ev),a=Math.min(drag.t,p.t),b=Math.max(drag.t,p.t);drag=null;sel.setAttribute('width',0);if(Math.abs(b-a)>(view[1]-view[0])/200)setView(a,b)});
document.querySelectorAll('.tl-tools button').forEach(function(b){b.addEventListener('click',function(){var z=b.dataset.z,c=(view[0]+view[1])/2,w=view[1]-view[0];if(z==='in')setView(c-w/4,c+w/4);else if(z==='out')setView(c-w,c+w);else setView(0,D.span)})});
function el2(n,a,t){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);if(t!==undefined)e.textContent=t;return e}
var pal=['#0072b2','#e69f00','#009e73','#cc79a7','#56b4e9','#d55e00','#f0e442','#000000','#999999','#7f3c8d'];
function waterfall(q){var W=760,L=150,R=60,RH=18,rows=[['client latency',0,q.lat,'#555']];
 if(q.c&&(q.c[0]||q.c[1]||q.c[2])){rows.push(['client upload',0,q.c[0],'#888'],['client wait',q.c[0],q.c[1],'#888'],['client response',q.c[0]+q.c[1],q.c[2],'#888'])}
 (q.s||[]).forEach(function(s,i){rows.push([s[0],s[1],s[2],s[0]==='total'?'#444':pal[i%pal.length]])});
 var end=q.lat;rows.forEach(function(r){end=Math.max(end,r[1]+r[2])});if(!(end>0))end=1;
 var H=26+RH*rows.length+24,s=el2('svg',{viewBox:'0 0 '+W+' '+H,'class':'plot waterfall'});
 s.appendChild(el2('text',{x:8,y:14,'class':'ptitle'},q.id+' ('+q.lv+'): '+fmt(q.lat)+' s'+(q.st!=='ok'?' ['+q.st+']':'')));
 var X=function(v){return L+v/end*(W-L-R)},y=24;
 rows.forEach(function(r,ri){s.appendChild(el2('text',{x:L-6,y:y+12,'text-anchor':'end','class':'tick'},r[0]));
 if(ri===0&&q.a&&q.a.length){q.a.forEach(function(p){var g=el2('rect',{x:X(p[1]),y:y+2,width:Math.max(X(p[1]+p[2])-X(p[1]),0.5),height:RH-5,fill:D.stateColors[p[0]],'class':'state'});g.appendChild(el2('title',{},D.states[p[0]]+': '+fmt(p[2]*1e3)+' ms from '+fmt(p[1]*1e3)+' ms'));s.appendChild(g)});s.appendChild(el2('text',{x:X(q.lat)+4,y:y+12,'class':'tick small'},fmt(q.lat*1e3)+' ms'));y+=RH;return}
 var g=el2('rect',{x:X(r[1]),y:y+2,width:Math.max(X(r[1]+r[2])-X(r[1]),1),height:RH-5,fill:r[3]});g.appendChild(el2('title',{},r[0]+': '+fmt(r[2]*1e3)+' ms from '+fmt(r[1]*1e3)+' ms'));s.appendChild(g);s.appendChild(el2('text',{x:X(r[1]+r[2])+4,y:y+12,'class':'tick small'},fmt(r[2]*1e3)+' ms'));y+=RH});
 ticks(0,end,6).forEach(function(t){s.appendChild(el2('text',{x:X(t),y:y+18,'text-anchor':'middle','class':'tick'},fmt(t*1e3)+' ms'))});
 if(!(q.s&&q.s.length))s.appendChild(el2('text',{x:L,y:y+34,'class':'tick'},'no server stages for this request (no telemetry joined, or no stage preset)'));
 return s}
var wf=document.getElementById('waterfall'),on=null;
function show(i){var q=D.reqs[i],t=svg.querySelector('.rq[data-r="'+i+'"]');if(!q)return;if(on)on.classList.remove('on');on=t;if(t)t.classList.add('on');
 while(wf.firstChild)wf.removeChild(wf.firstChild);var cap=document.createElement('p');cap.className='note';cap.textContent='Waterfall of request '+(i)+' (client phases on the client clock; server stages on the server clock, laid from the end of the upload):';wf.appendChild(cap);wf.appendChild(waterfall(q))}
svg.addEventListener('click',function(ev){var t=ev.target;if(t.classList.contains('rq'))show(+t.dataset.r)});
setView(0,D.span);
// Links into the page: #req=N draws request N's waterfall, #t=A-B zooms the timeline to A..B s.
function hash(){var h=location.hash,m=h.match(/^#req=(\d+)$/),z=h.match(/^#t=([0-9.]+)-([0-9.]+)$/);if(m)show(+m[1]);if(z)setView(+z[1],+z[2])}
window.addEventListener('hashchange',hash);hash();
})();
`
