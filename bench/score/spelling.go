package score

import (
	"strings"
)

// americanize maps each word of s from British to American spelling by exact
// lookup, and re-joins the words with single spaces.
func americanize(s string) string {
	words := pyFields(s)
	for i, w := range words {
		if a, ok := spellings[w]; ok {
			words[i] = a
		}
	}
	return strings.Join(words, " ")
}

// spellings is the British -> American table. It is built once from the word
// families below and never modified afterwards.
var spellings = buildSpellings()

func buildSpellings() map[string]string {
	m := make(map[string]string, 2048)
	add := func(brit, amer string) {
		if brit != amer {
			m[brit] = amer
		}
	}

	// -our -> -or. Each line: British base, then suffixes that form words
	// spelt with the same stem ("" is the base itself).
	for _, line := range lines(ourWords) {
		base, sfx := splitFamily(line)
		us := strings.TrimSuffix(base, "our") + "or"
		for _, x := range sfx {
			add(base+x, us+x)
		}
	}

	// -re -> -er. Flags: s (plural), v (verb: -d/-ing), plus compounds.
	for _, line := range lines(reWords) {
		base, sfx := splitFamily(line)
		stem := strings.TrimSuffix(base, "re") // "cent"
		us := stem + "er"                      // "center"
		for _, x := range sfx {
			if x == "v" {
				add(stem+"red", us+"ed")
				add(stem+"ring", us+"ing")
			} else { // the base, its plural, or a word written after it
				add(base+x, us+x)
			}
		}
	}

	// -ise -> -ize and -isation -> -ization. Flags after the slash: n adds
	// -isation(s), r adds -iser(s).
	for _, item := range strings.Fields(iseWords) {
		stem, flags, _ := strings.Cut(item, "/")
		for _, e := range []string{"ise", "ises", "ised", "ising"} {
			add(stem+e, stem+"iz"+e[2:])
		}
		if strings.Contains(flags, "n") {
			add(stem+"isation", stem+"ization")
			add(stem+"isations", stem+"izations")
		}
		if strings.Contains(flags, "r") {
			add(stem+"iser", stem+"izer")
			add(stem+"isers", stem+"izers")
		}
	}

	// -yse -> -yze.
	for _, stem := range strings.Fields(yseStems) {
		// "-yses" is left out: analyses, paralyses, dialyses... are also
		// plural nouns.
		for _, e := range []string{"yse", "ysed", "ysing"} {
			add(stem+e, stem+"yz"+e[2:])
		}
	}

	// Doubled l before a suffix in British English (travelled -> traveled).
	// Flags: r adds -ller(s).
	for _, item := range strings.Fields(llWords) {
		stem, flags, _ := strings.Cut(item, "/")
		add(stem+"led", stem[:len(stem)-1]+"led")
		add(stem+"ling", stem[:len(stem)-1]+"ling")
		if strings.Contains(flags, "r") {
			add(stem+"ler", stem[:len(stem)-1]+"ler")
			add(stem+"lers", stem[:len(stem)-1]+"lers")
		}
	}

	// Single l in British English where American doubles it (enrol -> enroll).
	for _, stem := range strings.Fields(singleLStems) {
		add(stem, stem+"l")
		add(stem+"s", stem+"ls")
	}
	for _, stem := range []string{"enrol", "fulfil", "instil", "instal", "enthral"} {
		add(stem+"ment", stem+"lment")
		add(stem+"ments", stem+"lments")
	}

	// -ence -> -ense.
	for _, stem := range strings.Fields(enceStems) {
		add(stem+"ence", stem+"ense")
		add(stem+"ences", stem+"enses")
	}

	// -ogue -> -og.
	for _, stem := range strings.Fields(ogueStems) {
		add(stem+"ogue", stem+"og")
		add(stem+"ogues", stem+"ogs")
		add(stem+"ogued", stem+"oged")
		add(stem+"oguing", stem+"oging")
	}

	// Everything else, one pair per entry.
	f := strings.Fields(pairWords)
	for i := 0; i+1 < len(f); i += 2 {
		add(f[i], f[i+1])
	}
	return m
}

// lines returns the non-empty, non-comment lines of a table.
func lines(table string) []string {
	var out []string
	for _, l := range strings.Split(table, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// splitFamily parses "base: sfx1 sfx2"; the base itself is always included.
func splitFamily(line string) (base string, suffixes []string) {
	base, rest, _ := strings.Cut(line, ":")
	return strings.TrimSpace(base), append([]string{""}, strings.Fields(rest)...)
}

const ourWords = `
colour: s ed ing ings ful fully less ist ists ation ations way
watercolour: s ist ists
discolour: s ed ing ation ations
multicolour: ed
favour: s ed ing able ably ite ites itism
unfavour: able ably
honour: s ed ing able ably ary ee ees
dishonour: s ed ing able ably
behaviour: s al ally ism ist ists
misbehaviour: s
labour: s ed ing er ers
neighbour: s ed ing ly hood hoods liness
harbour: s ed ing
humour: s ed ing less
flavour: s ed ing ings ful less some
rumour: s ed
savour: s ed ing y ies
saviour: s
armour: s ed er ers y ies
endeavour: s ed ing
odour: s less
malodour: s
vapour: s ware
vigour:
valour:
rigour: s
tumour: s
clamour: s ed ing
parlour: s
splendour: s
candour:
ardour: s
fervour:
rancour:
demeanour: s
arbour: s
succour: s ed ing
enamour: ed
clangour:
`

const reWords = `
centre: s v piece pieces fold
epicentre: s
theatre: s goer goers
amphitheatre: s
metre: s
kilometre: s
centimetre: s
millimetre: s
decimetre: s
nanometre: s
micrometre: s
litre: s
millilitre: s
centilitre: s
decilitre: s
kilolitre: s
fibre: s glass board
calibre: s
sabre: s
sombre: ly
spectre: s
meagre: ly
lustre: s less
mitre: s v
ochre: s
sceptre: s
sepulchre: s
reconnoitre: s v
goitre: s
saltpetre:
accoutre: s v
titre: s
nitre:
`

// Stems of verbs written -ise in British and -ize in American English. Verbs
// that are -ise in both (advertise, advise, comprise, exercise, surprise...)
// are deliberately absent. Flags after the slash: n adds -isation(s), r adds
// -iser(s).
const iseWords = `
actual/n agon antagon apolog atom/r author/n bapt brutal/n capital/n categor/n
central/n character/n civil/n colon/nr commercial/n computer/n critic crystall/n
custom/n decentral/n demoral/n destabil/n digital/n digit/n dramat/n econom emphas
empath energ/r equal/r evangel familiar/n fantas final/n formal/n fossil/n
fertil/nr general/n global/n harmon/n hospital/n human/n hybrid/n hypnot ideal/n
immun/n industrial/n initial/n internal/n international/n item/n jeopard legal/n
legitim liberal/n local/n magnet/n marginal/n maxim/n memor mesmer metabol
militar/n demilitar/n minim/nr mobil/n modern/nr monopol/n moral national/n
natural/n neutral/n normal/n optim/nr organ/nr ostrac oxid/n pasteur/n patron
penal personal/n philosoph plagiar polar/n popular/n pressur/n privat/n priorit/n
proselyt public pulver/n radical/n random/nr rational/n real/n recogn reorgan/n
revital/n revolution romantic sanit/r satir scandal scrutin sensational sensit/n
serial/n social/nr solemn special/n stabil/nr standard/n steril/nr stigmat
subsid/r summar symbol/n sympath/r synchron/n synthes/r systemat/n tantal
terror theor total/r traumat trivial/n union/n urban/n util/n vandal vapor/nr
verbal/n victim/n visual/n vocal/n western/n woman/r anglic/n american/n botan
canon/n carbon/n caramel/n cannibal/n catech cauter/n compartmental/n
conceptual/n contextual/n cosmopolitan criminal/n decriminal/n democrat/n
demonet/n deodor/r desensit/n dehuman/n demagnet/n demobil/n demon/n
denational/n denuclear/n depersonal/n depressur/n disorgan/n editorial emotional
epitom eulog euphem extempor external/n fetish femin/n fictional/n fratern
galvan/n glamor gormand hellen/n homogen/nr hyperbol hypothes idol/n immortal/n
immobil/nr incentiv individual/n institutional/n intellectual/n italic ion/nr
latin/n lion liquid/r macadam material/n mechan/n miniatur/n monet/n motor/n
mytholog notar novel palat/n parenthes pedestrian/n plural politic/n
professional/n proletarian/n regular/n rhapsod ritual/n routin rural secular/n
sermon sexual/n soliloqu spiritual/n styl suburban/n tempor tender/r textur
topical tyrann vascular/n vernacular vulcan/n vulgar/n winter
`

// Stems spelt -yse in British English (analyse, paralyse...).
const yseStems = `anal paral catal breathal dial electrol hydrol psychoanal`

// Verbs whose final l is doubled before -ed/-ing in British English only.
const llWords = `
travel/r cancel model/r label/r level/r fuel marvel channel counsel dial/r
duel/r equal funnel grovel/r jewel libel panel pedal pencil quarrel/r revel/r
rival shovel/r shrivel snorkel/r spiral swivel tunnel/r unravel yodel/r enamel
barrel bevel cudgel chisel/r drivel/r kennel marshal/r medal initial refuel
remodel/r tassel towel trammel pummel signal/r total tinsel gambol bejewel
dishevel disembowel empanel ravel stencil cavil carol/r squirrel apparel imperil
mislabel victual/r
`

// British spellings with a single l where American English doubles it.
const singleLStems = `enrol fulfil instil distil enthral appal instal`

const enceStems = `def off lic pret`

const ogueStems = `anal catal dial homol`

// pairWords lists single British/American pairs, several per line.
const pairWords = `
grey gray  greys grays  greyed grayed  greying graying  greyish grayish  greyness grayness
greyer grayer  greyest grayest  greyscale grayscale
aluminium aluminum  tyre tire  tyres tires  kerb curb  kerbs curbs  kerbside curbside
cheque check  cheques checks  chequebook checkbook  chequebooks checkbooks  chequered checkered
programme program  programmes programs
draught draft  draughts drafts  draughty drafty  draughtsman draftsman  draughtsmen draftsmen
plough plow  ploughs plows  ploughed plowed  ploughing plowing  ploughman plowman  ploughshare plowshare
pyjamas pajamas  pyjama pajama
mould mold  moulds molds  moulded molded  moulding molding  mouldings moldings  mouldy moldy
smoulder smolder  smoulders smolders  smouldered smoldered  smouldering smoldering
moult molt  moults molts  moulted molted  moulting molting
sceptic skeptic  sceptics skeptics  sceptical skeptical  sceptically skeptically  scepticism skepticism
storey story  storeys stories
aeroplane airplane  aeroplanes airplanes
cosy cozy  cosier cozier  cosiest coziest  cosily cozily  cosiness coziness
doughnut donut  doughnuts donuts
gaol jail  gaols jails  gaoled jailed  gaoler jailer  gaolers jailers
moustache mustache  moustaches mustaches  moustached mustached
sulphur sulfur  sulphate sulfate  sulphates sulfates  sulphide sulfide  sulphuric sulfuric  sulphurous sulfurous
yoghurt yogurt  yoghurts yogurts  yoghourt yogurt
practise practice  practises practices  practised practiced  practising practicing
speciality specialty  specialities specialties
mollusc mollusk  molluscs mollusks
omelette omelet  omelettes omelets
annexe annex
waggon wagon  waggons wagons
woollen woolen  woollens woolens
jewellery jewelry  jeweller jeweler  jewellers jewelers
traveller traveler  travellers travelers
counsellor counselor  counsellors counselors  councillor councilor  councillors councilors
marvellous marvelous  marvellously marvelously  libellous libelous  libellously libelously
medallist medalist  medallists medalists  duellist duelist  duellists duelists
skilful skillful  skilfully skillfully  unskilful unskillful  wilful willful  wilfully willfully
instalment installment  instalments installments
manoeuvre maneuver  manoeuvres maneuvers  manoeuvred maneuvered  manoeuvring maneuvering
manoeuvrable maneuverable  manoeuvrability maneuverability
artefact artifact  artefacts artifacts
ageing aging  judgement judgment  judgements judgments
acknowledgement acknowledgment  acknowledgements acknowledgments
likeable likable  sizeable sizable  loveable lovable  saleable salable  unshakeable unshakable
liveable livable  moveable movable  unmistakeable unmistakable  useable usable  rateable ratable
anaemia anemia  anaemic anemic  anaesthesia anesthesia  anaesthetic anesthetic  anaesthetics anesthetics
anaesthetist anesthetist  anaesthetists anesthetists  anaesthetise anesthetize  anaesthetised anesthetized
paediatric pediatric  paediatrics pediatrics  paediatrician pediatrician  paediatricians pediatricians
encyclopaedia encyclopedia  encyclopaedias encyclopedias  encyclopaedic encyclopedic
orthopaedic orthopedic  orthopaedics orthopedics
haemorrhage hemorrhage  haemorrhages hemorrhages  haemorrhaging hemorrhaging
haemoglobin hemoglobin  haematology hematology  haemophilia hemophilia  haemorrhoids hemorrhoids
leukaemia leukemia  oestrogen estrogen  oesophagus esophagus  oesophageal esophageal
foetus fetus  foetuses fetuses  foetal fetal  foetid fetid
diarrhoea diarrhea  homoeopathy homeopathy  homoeopathic homeopathic
gynaecology gynecology  gynaecologist gynecologist  gynaecologists gynecologists  gynaecological gynecological
mediaeval medieval  caesarean cesarean  faeces feces  paedophile pedophile  paedophiles pedophiles
palaeontology paleontology  palaeontologist paleontologist  palaeolithic paleolithic
behove behoove  behoves behooves  carburettor carburetor  carburettors carburetors
titbit tidbit  titbits tidbits  pedlar peddler  pedlars peddlers  liquorice licorice
furore furor  gramme gram  grammes grams  kilogramme kilogram  kilogrammes kilograms
tranquillise tranquilize  tranquillised tranquilized  tranquillising tranquilizing
tranquilliser tranquilizer  tranquillisers tranquilizers
colourise colorize  colourised colorized  colourising colorizing  vapourise vaporize  vapourised vaporized
recognisable recognizable  unrecognisable unrecognizable  recognisably recognizably  realisable realizable
organisational organizational  organisationally organizationally
unauthorised unauthorized  unrecognised unrecognized  unrealised unrealized  uncivilised uncivilized
unorganised unorganized  unpasteurised unpasteurized  uncategorised uncategorized
storeyed storied  jewelled jeweled
analyser analyzer  analysers analyzers  catalyser catalyzer  breathalyser breathalyzer  breathalysers breathalyzers
defenceless defenseless  licenced licensed  licencing licensing
`
