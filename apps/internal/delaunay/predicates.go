package delaunay

import "math/big"

// Error-bound constants of the floating-point filters, from J. R. Shewchuk,
// "Adaptive Precision Floating-Point Arithmetic and Fast Robust Geometric
// Predicates" (1997): o3derrboundA = (7 + 56ε)ε and isperrboundA =
// (16 + 224ε)ε with ε = 2^-53. When the filter cannot decide the sign, the
// determinant is evaluated exactly with math/big.
const (
	machEps      = 1.0 / (1 << 53)
	o3dErrBound  = (7 + 56*machEps) * machEps
	inSphErrBond = (16 + 224*machEps) * machEps
)

// vec is a point in 3-D space.
type vec = [3]float64

// orient returns the sign of det[b−a; c−a; d−a]: +1 when (a, b, c, d) is a
// positively oriented (right-handed) tetrahedron, −1 when it is negatively
// oriented, 0 when the four points are coplanar. The sign is exact.
func orient(a, b, c, d vec) int {
	// Shewchuk's orient3d computes det[a−d; b−d; c−d] = −det[b−a; c−a; d−a].
	adx, ady, adz := a[0]-d[0], a[1]-d[1], a[2]-d[2]
	bdx, bdy, bdz := b[0]-d[0], b[1]-d[1], b[2]-d[2]
	cdx, cdy, cdz := c[0]-d[0], c[1]-d[1], c[2]-d[2]
	bdxcdy, cdxbdy := bdx*cdy, cdx*bdy
	cdxady, adxcdy := cdx*ady, adx*cdy
	adxbdy, bdxady := adx*bdy, bdx*ady
	det := adz*(bdxcdy-cdxbdy) + bdz*(cdxady-adxcdy) + cdz*(adxbdy-bdxady)
	perm := (abs(bdxcdy)+abs(cdxbdy))*abs(adz) +
		(abs(cdxady)+abs(adxcdy))*abs(bdz) +
		(abs(adxbdy)+abs(bdxady))*abs(cdz)
	if bound := o3dErrBound * perm; det > bound {
		return -1
	} else if -det > bound {
		return 1
	}
	return -orientExact(a, b, c, d)
}

// orientExact returns the sign of det[a−d; b−d; c−d] in exact arithmetic.
func orientExact(a, b, c, d vec) int {
	var e exact
	var ad, bd, cd [3]*big.Float
	for i := range 3 {
		ad[i] = e.sub(a[i], d[i])
		bd[i] = e.sub(b[i], d[i])
		cd[i] = e.sub(c[i], d[i])
	}
	sign := e.det3(ad, bd, cd).Sign()
	if e.inexact {
		return orientRat(a, b, c, d)
	}
	return sign
}

// orientRat is orientExact with rational arithmetic, for the rare inputs
// whose exponents are too far apart for exactPrec bits.
func orientRat(a, b, c, d vec) int {
	var ad, bd, cd [3]*big.Rat
	for i := range 3 {
		ad[i] = sub(a[i], d[i])
		bd[i] = sub(b[i], d[i])
		cd[i] = sub(c[i], d[i])
	}
	return det3(ad, bd, cd).Sign()
}

// exactPrec is the precision of the big.Float evaluation of determinants:
// ample for float64 inputs of comparable magnitude; every operation's
// accuracy is checked, and an inexact one falls back to big.Rat.
const exactPrec = 4096

// exact evaluates sums and products of float64 values in big.Float,
// recording whether any rounding occurred.
type exact struct{ inexact bool }

func (e *exact) check(x *big.Float) *big.Float {
	if x.Acc() != big.Exact {
		e.inexact = true
	}
	return x
}

func (e *exact) sub(x, y float64) *big.Float {
	fx := new(big.Float).SetPrec(exactPrec).SetFloat64(x)
	fy := new(big.Float).SetPrec(exactPrec).SetFloat64(y)
	return e.check(fx.Sub(fx, fy))
}

func (e *exact) mul(x, y *big.Float) *big.Float {
	return e.check(new(big.Float).SetPrec(exactPrec).Mul(x, y))
}

func (e *exact) add(x, y *big.Float) *big.Float {
	return e.check(new(big.Float).SetPrec(exactPrec).Add(x, y))
}

func (e *exact) minus(x, y *big.Float) *big.Float {
	return e.check(new(big.Float).SetPrec(exactPrec).Sub(x, y))
}

// det3 returns the determinant of the 3×3 matrix with rows r0, r1, r2.
func (e *exact) det3(r0, r1, r2 [3]*big.Float) *big.Float {
	minor := func(a, b, c, d *big.Float) *big.Float { return e.minus(e.mul(a, d), e.mul(b, c)) }
	t0 := e.mul(r0[0], minor(r1[1], r1[2], r2[1], r2[2]))
	t1 := e.mul(r0[1], minor(r1[0], r1[2], r2[0], r2[2]))
	t2 := e.mul(r0[2], minor(r1[0], r1[1], r2[0], r2[1]))
	return e.add(e.minus(t0, t1), t2)
}

// inSphere returns +1 when e lies strictly inside the circumsphere of the
// positively oriented tetrahedron (a, b, c, d) (see orient), −1 when it lies
// strictly outside and 0 when the five points are cospherical. For a
// negatively oriented tetrahedron the sign is reversed. The sign is exact.
func inSphere(a, b, c, d, e vec) int {
	// Shewchuk's insphere is positive for e inside when his orient3d(a, b,
	// c, d) > 0, i.e. when orient(a, b, c, d) < 0: hence the negation.
	aex, aey, aez := a[0]-e[0], a[1]-e[1], a[2]-e[2]
	bex, bey, bez := b[0]-e[0], b[1]-e[1], b[2]-e[2]
	cex, cey, cez := c[0]-e[0], c[1]-e[1], c[2]-e[2]
	dex, dey, dez := d[0]-e[0], d[1]-e[1], d[2]-e[2]

	aexbey, bexaey := aex*bey, bex*aey
	bexcey, cexbey := bex*cey, cex*bey
	cexdey, dexcey := cex*dey, dex*cey
	dexaey, aexdey := dex*aey, aex*dey
	aexcey, cexaey := aex*cey, cex*aey
	bexdey, dexbey := bex*dey, dex*bey
	ab := aexbey - bexaey
	bc := bexcey - cexbey
	cd := cexdey - dexcey
	da := dexaey - aexdey
	ac := aexcey - cexaey
	bd := bexdey - dexbey

	abc := aez*bc - bez*ac + cez*ab
	bcd := bez*cd - cez*bd + dez*bc
	cda := cez*da + dez*ac + aez*cd
	dab := dez*ab + aez*bd + bez*da

	alift := aex*aex + aey*aey + aez*aez
	blift := bex*bex + bey*bey + bez*bez
	clift := cex*cex + cey*cey + cez*cez
	dlift := dex*dex + dey*dey + dez*dez

	det := (dlift*abc - clift*dab) + (blift*cda - alift*bcd)

	aezp, bezp, cezp, dezp := abs(aez), abs(bez), abs(cez), abs(dez)
	aexbeyp, bexaeyp := abs(aexbey), abs(bexaey)
	bexceyp, cexbeyp := abs(bexcey), abs(cexbey)
	cexdeyp, dexceyp := abs(cexdey), abs(dexcey)
	dexaeyp, aexdeyp := abs(dexaey), abs(aexdey)
	aexceyp, cexaeyp := abs(aexcey), abs(cexaey)
	bexdeyp, dexbeyp := abs(bexdey), abs(dexbey)
	perm := ((cexdeyp+dexceyp)*bezp+(dexbeyp+bexdeyp)*cezp+(bexceyp+cexbeyp)*dezp)*alift +
		((dexaeyp+aexdeyp)*cezp+(aexceyp+cexaeyp)*dezp+(cexdeyp+dexceyp)*aezp)*blift +
		((aexbeyp+bexaeyp)*dezp+(bexdeyp+dexbeyp)*aezp+(dexaeyp+aexdeyp)*bezp)*clift +
		((bexceyp+cexbeyp)*aezp+(cexaeyp+aexceyp)*bezp+(aexbeyp+bexaeyp)*cezp)*dlift
	if bound := inSphErrBond * perm; det > bound {
		return -1
	} else if -det > bound {
		return 1
	}
	return -inSphereExact(a, b, c, d, e)
}

// inSphereExact returns the sign of Shewchuk's insphere determinant
// det[p−e, |p−e|²] over p = a, b, c, d, in exact arithmetic.
func inSphereExact(a, b, c, d, e vec) int {
	var x exact
	var rows [4][4]*big.Float
	for r, p := range [4]vec{a, b, c, d} {
		lift := new(big.Float).SetPrec(exactPrec)
		for i := range 3 {
			rows[r][i] = x.sub(p[i], e[i])
			lift = x.add(lift, x.mul(rows[r][i], rows[r][i]))
		}
		rows[r][3] = lift
	}
	// Laplace expansion along the lift column: det = Σ_r (−1)^(r+3) lift_r · M_r3.
	det := new(big.Float).SetPrec(exactPrec)
	for r := range 4 {
		var m [3][3]*big.Float
		k := 0
		for q := range 4 {
			if q != r {
				m[k] = [3]*big.Float{rows[q][0], rows[q][1], rows[q][2]}
				k++
			}
		}
		term := x.mul(rows[r][3], x.det3(m[0], m[1], m[2]))
		if (r+3)%2 == 1 {
			det = x.minus(det, term)
		} else {
			det = x.add(det, term)
		}
	}
	if x.inexact {
		return inSphereRat(a, b, c, d, e)
	}
	return det.Sign()
}

// inSphereRat is inSphereExact with rational arithmetic.
func inSphereRat(a, b, c, d, e vec) int {
	rows := [4][4]*big.Rat{}
	for r, p := range [4]vec{a, b, c, d} {
		lift := new(big.Rat)
		for i := range 3 {
			rows[r][i] = sub(p[i], e[i])
			lift.Add(lift, new(big.Rat).Mul(rows[r][i], rows[r][i]))
		}
		rows[r][3] = lift
	}
	det := new(big.Rat)
	for r := range 4 {
		var m [3][3]*big.Rat
		k := 0
		for q := range 4 {
			if q != r {
				m[k] = [3]*big.Rat{rows[q][0], rows[q][1], rows[q][2]}
				k++
			}
		}
		term := new(big.Rat).Mul(rows[r][3], det3(m[0], m[1], m[2]))
		if (r+3)%2 == 1 {
			term.Neg(term)
		}
		det.Add(det, term)
	}
	return det.Sign()
}

// det3 returns the determinant of the 3×3 matrix with rows r0, r1, r2.
func det3(r0, r1, r2 [3]*big.Rat) *big.Rat {
	minor := func(a, b, c, d *big.Rat) *big.Rat {
		x := new(big.Rat).Mul(a, d)
		return x.Sub(x, new(big.Rat).Mul(b, c))
	}
	t0 := new(big.Rat).Mul(r0[0], minor(r1[1], r1[2], r2[1], r2[2]))
	t1 := new(big.Rat).Mul(r0[1], minor(r1[0], r1[2], r2[0], r2[2]))
	t2 := new(big.Rat).Mul(r0[2], minor(r1[0], r1[1], r2[0], r2[1]))
	return t0.Sub(t0, t1).Add(t0, t2)
}

// sub returns x − y exactly.
func sub(x, y float64) *big.Rat {
	rx := new(big.Rat).SetFloat64(x)
	return rx.Sub(rx, new(big.Rat).SetFloat64(y))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
